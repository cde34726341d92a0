# Shared by the Scripts: install what is missing, from Debian's packages, and find the toolchain.
# Sourced, not run.

# The C libraries the package links (system-library targets) and the tool that finds them.
BUILD_PACKAGES="libsqlite3-dev libevent-dev libpq-dev pkg-config"
# What Scripts/package uses besides: dpkg-deb, dpkg-shlibdeps and dpkg-gencontrol; strip.
PACKAGE_PACKAGES="dpkg-dev binutils"

# Installs the named Debian packages that are not installed yet.
ensure_packages() {
    local missing=()
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# Makes sure `swift` is on PATH (the toolchain may live outside the default PATH).
ensure_swift() {
    command -v swift >/dev/null 2>&1 && return 0
    for dir in /opt/swift/usr/bin /usr/share/swift/usr/bin /usr/local/swift/usr/bin; do
        if [ -x "$dir/swift" ]; then
            PATH="$dir:$PATH"
            export PATH
            return 0
        fi
    done
    echo "swift is not installed: get a Swift 6 toolchain for Linux first (https://www.swift.org/install/linux/)" >&2
    exit 1
}

# The repository root, whatever the caller's directory.
repo_root() {
    cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd
}
