#ifndef PROFILED_CLINUX_SHIM_H
#define PROFILED_CLINUX_SHIM_H
// Linux calls and constants that Swift's Glibc module leaves out (GNU extensions, macros),
// as functions Swift can call. Nothing here is specific to libevent or SQLite.
#include <sys/types.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <pthread.h>
#include <malloc.h>

/// accept4 is a GNU extension that the Glibc module does not declare; it saves a
/// fcntl per connection by making the socket non-blocking as it is accepted.
extern int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);

#ifndef SCHED_IDLE
#define SCHED_IDLE 5 /* declared only with _GNU_SOURCE */
#endif

/// Moves the calling thread to SCHED_IDLE (Linux schedules per thread): it then runs only on
/// CPU time no ordinary thread wants. Background work that must yield to the request path;
/// returns 0 or -1 with errno. There is no way back without privileges.
static inline int profiled_idle_this_thread(void) {
    struct sched_param parameters = { .sched_priority = 0 };
    return sched_setscheduler((pid_t)syscall(SYS_gettid), SCHED_IDLE, &parameters);
}

/// Lowers the calling thread's scheduling priority (Linux applies nice per thread); returns 0
/// or -1 with errno.
static inline int profiled_nice_this_thread(int niceness) {
    return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), niceness);
}

#ifndef RUSAGE_THREAD
#define RUSAGE_THREAD 1 /* declared only with _GNU_SOURCE */
#endif

/// CPU time and context switches of the calling thread alone (getrusage's RUSAGE_THREAD).
static inline int profiled_thread_usage(struct rusage *usage) {
    return getrusage(RUSAGE_THREAD, usage);
}

/// Caps glibc's malloc arenas at `arenas` (mallopt's M_ARENA_MAX is not in the Glibc module);
/// returns 1 on success.
static inline int profiled_limit_malloc_arenas(int arenas) {
    return mallopt(M_ARENA_MAX, arenas);
}

/// pthread_setname_np is a GNU extension the Glibc module does not declare: names threads,
/// at most 15 bytes, for `top -H` and /proc/PID/task/*/comm.
extern int pthread_setname_np(pthread_t thread, const char *name);

#endif
