// A network's round trip on one machine, for Scripts/bench --client-cache --rtt-us: forwards
// connections to 127.0.0.1:LISTEN_PORT to 127.0.0.1:UPSTREAM_PORT and holds every chunk of
// bytes, each way, for half the round trip before passing it on, in order.
//
//   cc -O2 Scripts/delay-proxy.c -o delay-proxy && ./delay-proxy LISTEN_PORT UPSTREAM_PORT RTT_MICROSECONDS
//
// LISTEN_PORT 0 takes a free port; either way it prints "listening on PORT" once it listens.
// One thread, epoll, and a timerfd armed for the earliest chunk due, so that a held chunk costs
// no polling. A direction holding more than 4 MiB stops reading until it drains. Either side
// closing or failing closes both. It runs until killed.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define HELD_LIMIT (4u << 20)
#define READ_SIZE 65536

struct chunk {
    uint64_t due;
    size_t length, sent;
    struct chunk *next;
    char bytes[];
};

// One socket, and the chunks on their way to it.
struct side {
    int fd;
    struct side *peer;
    struct chunk *head, *tail;
    size_t held;
    int reading, writing;
    struct side *next_open;
};

static int epoll_fd, timer_fd;
static uint64_t one_way_ns;
static struct side *open_sides;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void watch(struct side *side) {
    struct epoll_event event = {.events = (side->reading ? EPOLLIN : 0) | (side->writing ? EPOLLOUT : 0),
                                .data.ptr = side};
    if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, side->fd, &event) < 0) die("epoll_ctl");
}

static void close_pair(struct side *side) {
    struct side *pair[2] = {side, side->peer};
    for (int i = 0; i < 2; i++) {
        struct side *s = pair[i];
        close(s->fd);
        for (struct chunk *c = s->head, *next; c; c = next) {
            next = c->next;
            free(c);
        }
        for (struct side **link = &open_sides; *link; link = &(*link)->next_open) {
            if (*link == s) {
                *link = s->next_open;
                break;
            }
        }
    }
    free(side->peer);
    free(side);
}

static struct side *add_side(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct side *side = calloc(1, sizeof *side);
    if (!side) die("calloc");
    side->fd = fd;
    side->reading = 1;
    side->next_open = open_sides;
    open_sides = side;
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = side};
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) < 0) die("epoll_ctl");
    return side;
}

// Reads what `from` has and holds it for its peer; 0 when the pair was closed.
static int take(struct side *from) {
    struct side *to = from->peer;
    struct chunk *chunk = malloc(sizeof *chunk + READ_SIZE);
    if (!chunk) die("malloc");
    ssize_t n = read(from->fd, chunk->bytes, READ_SIZE);
    if (n <= 0) {
        free(chunk);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
        close_pair(from);
        return 0;
    }
    // Held for the whole delay: keep only what was read.
    struct chunk *fitted = realloc(chunk, sizeof *chunk + (size_t)n);
    if (fitted) chunk = fitted;
    chunk->due = now_ns() + one_way_ns;
    chunk->length = (size_t)n;
    chunk->sent = 0;
    chunk->next = NULL;
    if (to->tail) to->tail->next = chunk; else to->head = chunk;
    to->tail = chunk;
    to->held += (size_t)n;
    if (to->held > HELD_LIMIT) {
        from->reading = 0;
        watch(from);
    }
    return 1;
}

// Writes the chunks of `to` that are due; 0 when the pair was closed.
static int deliver(struct side *to, uint64_t now) {
    while (to->head && to->head->due <= now) {
        struct chunk *chunk = to->head;
        ssize_t n = write(to->fd, chunk->bytes + chunk->sent, chunk->length - chunk->sent);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) break;
            close_pair(to);
            return 0;
        }
        chunk->sent += (size_t)n;
        to->held -= (size_t)n;
        if (chunk->sent < chunk->length) break;
        to->head = chunk->next;
        if (!to->head) to->tail = NULL;
        free(chunk);
    }
    int blocked = to->head && to->head->due <= now;
    int resume = !to->peer->reading && to->held <= HELD_LIMIT;
    if (blocked != to->writing) {
        to->writing = blocked;
        watch(to);
    }
    if (resume) {
        to->peer->reading = 1;
        watch(to->peer);
    }
    return 1;
}

static void arm_timer(void) {
    uint64_t earliest = 0;
    for (struct side *s = open_sides; s; s = s->next_open) {
        if (s->head && !s->writing && (!earliest || s->head->due < earliest)) earliest = s->head->due;
    }
    struct itimerspec when = {0};
    if (earliest) {
        when.it_value.tv_sec = (time_t)(earliest / 1000000000u);
        when.it_value.tv_nsec = (long)(earliest % 1000000000u);
    }
    if (timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &when, NULL) < 0) die("timerfd_settime");
}

static int loopback_socket(int port, int listening) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK * listening, 0);
    if (fd < 0) die("socket");
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (listening) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&address, sizeof address) < 0) die("bind");
        if (listen(fd, 1024) < 0) die("listen");
    } else if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0 ||
               fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// A whole decimal number, or -1.
static long number(const char *text) {
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    return *text >= '0' && *text <= '9' && *end == 0 && errno == 0 ? value : -1;
}

int main(int argc, char **argv) {
    long listen_port = argc == 4 ? number(argv[1]) : -1;
    long upstream_port = argc == 4 ? number(argv[2]) : -1;
    long rtt_us = argc == 4 ? number(argv[3]) : -1;
    if (listen_port < 0 || listen_port > 65535 || upstream_port < 1 || upstream_port > 65535 || rtt_us < 0 ||
        rtt_us > 10000000) {
        fprintf(stderr, "usage: delay-proxy LISTEN_PORT UPSTREAM_PORT RTT_MICROSECONDS (0 to 10000000)\n");
        return 64;
    }
    one_way_ns = (uint64_t)rtt_us * 500u;
    epoll_fd = epoll_create1(0);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    if (epoll_fd < 0 || timer_fd < 0) die("epoll_create1 or timerfd_create");
    int listener = loopback_socket((int)listen_port, 1);
    struct sockaddr_in bound;
    socklen_t bound_length = sizeof bound;
    if (getsockname(listener, (struct sockaddr *)&bound, &bound_length) < 0) die("getsockname");
    printf("listening on %d\n", ntohs(bound.sin_port));
    fflush(stdout);
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = &listener};
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listener, &event) < 0) die("epoll_ctl");
    event.data.ptr = &timer_fd;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, timer_fd, &event) < 0) die("epoll_ctl");
    struct epoll_event ready[64];
    for (;;) {
        int count = epoll_wait(epoll_fd, ready, 64, -1);
        if (count < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        // A pair closed during this round may still have events below: skip sides freed here
        // by checking each against the open list.
        for (int i = 0; i < count; i++) {
            void *what = ready[i].data.ptr;
            if (what == &listener) {
                int client;
                while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int upstream = loopback_socket((int)upstream_port, 0);
                    if (upstream < 0) {
                        close(client);
                        continue;
                    }
                    struct side *a = add_side(client), *b = add_side(upstream);
                    a->peer = b;
                    b->peer = a;
                }
                continue;
            }
            if (what == &timer_fd) {
                uint64_t expirations;
                (void)!read(timer_fd, &expirations, sizeof expirations);
                continue;
            }
            struct side *side = NULL;
            for (struct side *s = open_sides; s; s = s->next_open) {
                if (s == what) side = s;
            }
            if (!side) continue;
            if ((ready[i].events & (EPOLLERR | EPOLLHUP)) && !(ready[i].events & EPOLLIN)) {
                close_pair(side);
                continue;
            }
            if ((ready[i].events & EPOLLIN) && !take(side)) continue;
        }
        uint64_t now = now_ns();
        for (struct side *s = open_sides, *next; s; s = next) {
            next = s->next_open;
            if (s->head && s->head->due <= now && !deliver(s, now)) next = open_sides;
        }
        arm_timer();
    }
}
