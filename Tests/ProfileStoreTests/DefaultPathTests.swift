import ProfileStore
@testable import ProfileStoreSQLite
import Testing

@Suite struct DefaultPathTests {
    func path(_ environment: [String: String]) -> String {
        SQLiteProfileStore.defaultPath { environment[$0] }
    }

    @Test func cacheDirectoryComesFirst() {
        #expect(path(["CACHE_DIRECTORY": "/var/cache/profiled", "XDG_CACHE_HOME": "/x", "HOME": "/home/u"])
                == "/var/cache/profiled/profiles.sqlite3")
        #expect(path(["CACHE_DIRECTORY": "/var/cache/profiled/:/var/cache/other"])
                == "/var/cache/profiled/profiles.sqlite3")
    }

    @Test func thenXDGCacheHome() {
        #expect(path(["XDG_CACHE_HOME": "/home/u/.xdg", "HOME": "/home/u"]) == "/home/u/.xdg/profiled/profiles.sqlite3")
    }

    @Test func thenHome() {
        #expect(path(["HOME": "/home/u"]) == "/home/u/.cache/profiled/profiles.sqlite3")
        #expect(path(["HOME": "/home/u", "XDG_CACHE_HOME": "relative"]) == "/home/u/.cache/profiled/profiles.sqlite3")
        #expect(path(["HOME": "/home/u", "CACHE_DIRECTORY": "", "XDG_CACHE_HOME": ""])
                == "/home/u/.cache/profiled/profiles.sqlite3")
    }

    @Test func thenTheWorkingDirectory() {
        #expect(path([:]) == "profiles.sqlite3")
    }
}
