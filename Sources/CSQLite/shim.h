#ifndef PROFILED_CSQLITE_SHIM_H
#define PROFILED_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a cast macro that Swift cannot import.
static inline sqlite3_destructor_type profiled_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}

/// A zero-length text that lives for the whole process: binding a Swift empty
/// buffer (whose base address is NULL) would bind SQL NULL instead of ''.
static inline const char *profiled_sqlite_empty_text(void) {
    static const char empty[1] = { 0 };
    return empty;
}

/// sqlite3_db_config is variadic, which Swift cannot call. Turning the
/// checkpoint on close off lets a file be inspected and closed without
/// SQLite writing a leftover write-ahead log into it.
static inline int profiled_sqlite_set_checkpoint_on_close(sqlite3 *db, int enabled) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, !enabled, (int *)0);
}

/// Turns off SQLite's global memory statistics, which take a process-wide
/// mutex on every allocation. Must run before SQLite initializes; returns
/// SQLITE_MISUSE when it is too late, which is harmless.
static inline int profiled_sqlite_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
#endif
