#ifndef PROFILED_CLIBEVENT_SHIM_H
#define PROFILED_CLIBEVENT_SHIM_H
// These come first, or Foundation and libevent disagree about fd_set.
#include <sys/types.h>
#include <sys/time.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <netdb.h>
#include <event2/event.h>
#include <event2/buffer.h>
#include <event2/thread.h>
#include <event2/util.h>

#endif
