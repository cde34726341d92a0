#ifndef PROFILED_COPENSSL_SHIM_H
#define PROFILED_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

// OpenSSL's setters below are macros over SSL_CTX_ctrl and its option bits are built by a
// macro with casts, none of which Swift can import: one function each.

static inline int profiled_ssl_ctx_set_protocol_range(SSL_CTX *ctx, int min, int max) {
    return SSL_CTX_set_min_proto_version(ctx, min) && SSL_CTX_set_max_proto_version(ctx, max);
}

static inline int profiled_tls1_2_version(void) { return TLS1_2_VERSION; }
static inline int profiled_tls1_3_version(void) { return TLS1_3_VERSION; }

/// Partial writes and a write buffer that may move between retries (replies are queued in a
/// libevent buffer), buffers released while a connection is idle, no renegotiation, and an
/// end of stream without close_notify read as an end, as a half-closed client sends it.
static inline void profiled_ssl_ctx_set_profiled_modes(SSL_CTX *ctx) {
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION
                                 | SSL_OP_CIPHER_SERVER_PREFERENCE);
}

static inline void profiled_ssl_ctx_disable_session_cache(SSL_CTX *ctx) {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
}

static inline int profiled_ssl_set_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}

#endif
