// A server that does no work, for the loopback floor in docs/BENCHMARKS.md ("Reads from the
// cache"): two epoll loops answering every request line with one fixed VALUE line, without
// parsing, cache or locks.
//   cc -O2 -pthread Scripts/null-server.c -o null-server && ./null-server PORT THREADS
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>
static char reply[256]; static int reply_len;
static void *loop(void *arg) {
    int ep = *(int *)arg; struct epoll_event ev[64];
    char *in = malloc(1 << 16), *out = malloc(1 << 20);
    for (;;) {
        int n = epoll_wait(ep, ev, 64, -1);
        for (int i = 0; i < n; i++) {
            int fd = ev[i].data.fd; ssize_t r = recv(fd, in, 1 << 16, 0);
            if (r <= 0) { close(fd); continue; }
            int o = 0;
            for (ssize_t k = 0; k < r; k++) if (in[k] == '\n') { memcpy(out + o, reply, reply_len); o += reply_len; }
            if (o) send(fd, out, o, MSG_NOSIGNAL);
        }
    }
}
int main(int argc, char **argv) {
    int port = atoi(argv[1]), threads = atoi(argv[2]), one = 1, eps[8];
    reply_len = sprintf(reply, "VALUE u00000001 %050d %050d\n", 0, 0);
    int ls = socket(AF_INET, SOCK_STREAM, 0); setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, 4);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001) };
    if (bind(ls, (void *)&a, sizeof a) || listen(ls, 128)) { perror("bind"); return 1; }
    for (int i = 0; i < threads; i++) { pthread_t t; eps[i] = epoll_create1(0); pthread_create(&t, 0, loop, &eps[i]); }
    for (int c = 0;; c++) {
        int fd = accept4(ls, 0, 0, SOCK_NONBLOCK); if (fd < 0) continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, 4);
        struct epoll_event e = { .events = EPOLLIN, .data.fd = fd };
        epoll_ctl(eps[c % threads], EPOLL_CTL_ADD, fd, &e);
    }
}
