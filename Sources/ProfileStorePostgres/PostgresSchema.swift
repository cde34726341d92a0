import ProfilePostgres
import ProfileStore

/// The tables, triggers and functions profiled keeps in a PostgreSQL database, and their
/// creation on first start.
///
/// `profiles` holds what other programs may read and write with plain SQL naming only
/// `user_id`, `name` and `portrait_uri`: `seq` fills itself (a default on insert, a trigger on
/// every update that does not set it), and statement-level triggers with transition tables
/// tell every node which ids a statement changed, in one notification per statement (or per
/// 7,000 bytes of ids), never one per row. `profiled_schema` records the version.
///
/// Stateless; any thread.
enum PostgresSchema {
    static let version = 1
    /// The advisory lock key that schema creation holds (`pg_advisory_xact_lock(bigint)`):
    /// "profiled" in ASCII, so that other programs' keys are unlikely to meet it.
    static let creationLock: Int64 = 0x7072_6F66_696C_6564
    /// The first key of the two-key advisory locks a write takes on its ids' hashes.
    static let rowLockNamespace: Int32 = 0x7072_6F66
    /// The channel of invalidations and heartbeats.
    static let channel = "profiled"

    /// The statements that create version 1, in order.
    static let creation: [String] = [
        "CREATE TABLE profiled_schema (version integer NOT NULL)",
        "INSERT INTO profiled_schema (version) VALUES (\(version))",
        "CREATE SEQUENCE profiles_seq",
        """
        CREATE TABLE profiles (
            user_id text COLLATE "C" PRIMARY KEY CHECK (octet_length(user_id) BETWEEN 1 AND 128),
            name text NOT NULL DEFAULT '',
            portrait_uri text NOT NULL DEFAULT '',
            seq bigint NOT NULL DEFAULT nextval('profiles_seq')
        )
        """,
        "ALTER SEQUENCE profiles_seq OWNED BY profiles.seq",
        "CREATE INDEX profiles_by_seq ON profiles (seq)",
        // An update that does not set seq (plain SQL) makes the profile the newest, as a write
        // through a node does.
        """
        CREATE FUNCTION profiles_next_seq() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.seq := nextval('profiles_seq');
            RETURN NEW;
        END
        $$
        """,
        // The WHEN spares a node's own upserts, which set seq, a call into PL/pgSQL per row.
        """
        CREATE TRIGGER profiles_next_seq BEFORE UPDATE ON profiles FOR EACH ROW
            WHEN (NEW.seq IS NOT DISTINCT FROM OLD.seq) EXECUTE FUNCTION profiles_next_seq()
        """,
        // `I <epoch seconds> <length>:<id><length>:<id>...`: lengths in bytes, since an id may
        // hold any character but NUL; payloads stay under PostgreSQL's 8,000 bytes.
        """
        CREATE FUNCTION profiled_notify(ids text[]) RETURNS void LANGUAGE plpgsql AS $$
        DECLARE
            stamp text := to_char(extract(epoch FROM clock_timestamp()), 'FM9999999999.999999');
        BEGIN
            -- Entries go into the payload whose 7,000 bytes their start falls in: one query, no
            -- loop, and each payload ends within an id's length of 7,000 bytes.
            PERFORM pg_notify('\(channel)', 'I ' || stamp || ' ' || string_agg(entry, '' ORDER BY position))
            FROM (SELECT position, entry,
                         (sum(octet_length(entry)) OVER (ORDER BY position) - octet_length(entry)) / 7000 AS payload
                  FROM (SELECT position, octet_length(id) || ':' || id AS entry
                        FROM unnest(ids) WITH ORDINALITY AS listed (id, position)) AS entries) AS cut
            GROUP BY payload;
        END
        $$
        """,
        """
        CREATE FUNCTION profiles_notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM profiled_notify(ARRAY(SELECT user_id FROM inserted));
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE FUNCTION profiles_notify_updated() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM profiled_notify(ARRAY(SELECT user_id FROM before_update UNION SELECT user_id FROM after_update));
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE FUNCTION profiles_notify_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM profiled_notify(ARRAY(SELECT user_id FROM deleted));
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE FUNCTION profiles_notify_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('\(channel)', 'F ' || to_char(extract(epoch FROM clock_timestamp()), 'FM9999999999.999999'));
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE TRIGGER profiles_notify_insert AFTER INSERT ON profiles REFERENCING NEW TABLE AS inserted
            FOR EACH STATEMENT EXECUTE FUNCTION profiles_notify_inserted()
        """,
        """
        CREATE TRIGGER profiles_notify_update AFTER UPDATE ON profiles
            REFERENCING OLD TABLE AS before_update NEW TABLE AS after_update
            FOR EACH STATEMENT EXECUTE FUNCTION profiles_notify_updated()
        """,
        """
        CREATE TRIGGER profiles_notify_delete AFTER DELETE ON profiles REFERENCING OLD TABLE AS deleted
            FOR EACH STATEMENT EXECUTE FUNCTION profiles_notify_deleted()
        """,
        "CREATE TRIGGER profiles_notify_truncate AFTER TRUNCATE ON profiles FOR EACH STATEMENT EXECUTE FUNCTION profiles_notify_truncated()",
    ]

    /// Creates the schema in one transaction under an advisory lock, so that nodes started
    /// together do not race, or checks the one there is.
    /// - Throws: one sentence for the operator: a newer schema, or a `profiles` table that
    ///   profiled did not make.
    static func prepare(_ connection: PostgresConnection, deadline: Int) throws(PostgresStartupError) {
        do {
            try connection.execute("BEGIN", deadline: deadline)
            _ = try connection.query("SELECT pg_advisory_xact_lock($1)", [Array(String(creationLock).utf8)], deadline: deadline)
            let found = try connection.query(
                "SELECT to_regclass('profiled_schema') IS NOT NULL, to_regclass('profiles') IS NOT NULL", deadline: deadline)
            let hasSchema = found.string(0, 0) == "t", hasProfiles = found.string(0, 1) == "t"
            if hasSchema {
                let existing = try connection.query("SELECT max(version) FROM profiled_schema", deadline: deadline).int(0, 0) ?? 0
                try connection.execute("COMMIT", deadline: deadline)
                if existing > version {
                    throw PostgresStartupError("the database's profiled schema is version \(existing), newer than this profiled's (\(version)): upgrade profiled")
                }
                return
            }
            if hasProfiles {
                let columns = try connection.query("""
                    SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_attribute
                    WHERE attrelid = 'profiles'::regclass AND attnum > 0 AND NOT attisdropped
                    """, deadline: deadline).string(0, 0) ?? ""
                try connection.execute("ROLLBACK", deadline: deadline)
                throw PostgresStartupError("the database has a table profiles (\(columns)) that profiled did not make; use another database or schema")
            }
            for statement in creation { try connection.execute(statement, deadline: deadline) }
            try connection.execute("COMMIT", deadline: deadline)
        } catch let error as PostgresStartupError {
            throw error
        } catch let error as PostgresError {
            throw PostgresStartupError("cannot prepare the schema: \(error)")
        } catch {
            throw PostgresStartupError("cannot prepare the schema: \(error)")
        }
    }
}

/// Why a node cannot start over PostgreSQL: one sentence for the operator, no password in it.
///
/// A plain value; any thread.
public struct PostgresStartupError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
