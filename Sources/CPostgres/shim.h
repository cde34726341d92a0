#ifndef PROFILED_CPOSTGRES_SHIM_H
#define PROFILED_CPOSTGRES_SHIM_H
#include <libpq-fe.h>

// PQresultErrorField's field codes are character macros, which Swift cannot import.

/// The five-character SQLSTATE of an error.
static inline int profiled_pg_diag_sqlstate(void) { return PG_DIAG_SQLSTATE; }

/// The primary, human-readable message of an error: one line, no detail or hint.
static inline int profiled_pg_diag_message_primary(void) { return PG_DIAG_MESSAGE_PRIMARY; }

/// The severity (ERROR, FATAL, PANIC, WARNING, NOTICE, ...), never translated.
static inline int profiled_pg_diag_severity(void) { return PG_DIAG_SEVERITY_NONLOCALIZED; }

#endif
