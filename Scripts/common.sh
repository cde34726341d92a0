# Shared by the Scripts: install what is missing, from Debian's packages, and find the toolchain.
# Sourced, not run.

# The C libraries the package links (system-library targets) and the tool that finds them.
BUILD_PACKAGES="libsqlite3-dev libevent-dev libpq-dev libssl-dev pkg-config"
# What Scripts/package uses besides: dpkg-deb, dpkg-shlibdeps and dpkg-gencontrol; strip.
PACKAGE_PACKAGES="dpkg-dev binutils"

# Installs the named Debian packages that are not installed yet, and leaves no service they
# bring enabled or running: redis-server, postgresql and memcached are here for the tests and
# the bench, which start throw-away servers of their own, so a system-wide one would only hold
# their ports and start at every boot.
ensure_packages() {
    local missing=() package
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    local before status=0
    before="$(installed_packages)"
    # A policy-rc.d that exits 101 tells the maintainer scripts (invoke-rc.d, deb-systemd-invoke)
    # to start nothing. Put in place only where there is none, and removed however the install
    # ends: a subshell, so that its traps leave the caller's alone.
    (
        if [ ! -e /usr/sbin/policy-rc.d ] && [ ! -L /usr/sbin/policy-rc.d ]; then
            trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
            trap 'exit 130' INT
            trap 'exit 143' TERM
            { printf '#!/bin/sh\n# Scripts/common.sh: no service starts while it installs packages.\nexit 101\n' |
                $sudo tee /usr/sbin/policy-rc.d >/dev/null && $sudo chmod 0755 /usr/sbin/policy-rc.d; } || exit 1
        fi
        # apt's own output goes to APT_LOG when the caller names one (Scripts/test keeps it);
        # what will be installed, dependencies counted, is said first.
        local log="${APT_LOG:-/dev/stderr}" count
        $sudo apt-get update -qq >>"$log" 2>&1 || exit 1
        count="$(apt-get install -s --no-install-recommends "${missing[@]}" 2>/dev/null | grep -c '^Inst ' || true)"
        echo "installing: ${missing[*]} ($count packages with what they need)" >&2
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1
    ) || status=$?
    # The packages' postinsts enable their units whether or not systemd runs (deb-systemd-helper
    # makes the symlinks), so they are disabled here, also after a failed install. Only the
    # packages this call installed, dependencies included (postgresql's unit is postgresql-common's).
    local unit units=() script scripts=() still=()
    for package in $(comm -13 <(echo "$before") <(installed_packages)); do
        # Init scripts for a SysV init: their S links become K links. (systemctl disable, below,
        # does the same for a unit with an init script of the same name.)
        for script in $(dpkg-query -L "$package" | sed -n 's|^/etc/init\.d/||p'); do
            scripts+=("$script")
            $sudo update-rc.d "$script" disable >/dev/null
        done
        for unit in $(dpkg-query -L "$package" | grep -E '^(/usr)?/lib/systemd/system/[^/]+\.(service|socket|timer|path)$' |
                xargs -r grep -l '^\[Install\]' | xargs -r -n1 basename); do
            units+=("$unit")
            if [ -d /run/systemd/system ]; then
                # A template (name@.service) has no instance of its own to stop.
                case "$unit" in
                    *@.*) $sudo systemctl disable --quiet "$unit" ;;
                    *) $sudo systemctl disable --quiet --now "$unit" ;;
                esac
            elif command -v systemctl >/dev/null; then
                # Without a running systemd, systemctl edits the symlinks alone.
                $sudo systemctl disable --quiet "$unit"
            else
                # No systemd at all: its own helper removes the links it made, as a prerm would.
                $sudo env DPKG_MAINTSCRIPT_PACKAGE="$package" DPKG_MAINTSCRIPT_NAME=prerm deb-systemd-helper disable "$unit"
            fi
        done
    done
    # Enabled means a link under /etc/systemd/system to the unit (an alias, a .wants entry), or
    # a start link in a runlevel's directory to the init script.
    for unit in ${units[@]+"${units[@]}"}; do
        [ -z "$(find /etc/systemd/system -lname "*/$unit" -print -quit 2>/dev/null)" ] || still+=("$unit")
    done
    for script in ${scripts[@]+"${scripts[@]}"}; do
        [ -z "$(find /etc/rc?.d -name "S??$script" -print -quit 2>/dev/null)" ] || still+=("/etc/init.d/$script")
    done
    if [ ${#still[@]} -gt 0 ]; then
        echo "still enabled after installing: ${still[*]}" >&2
        return 1
    fi
    [ ${#units[@]} -eq 0 ] || echo "installed for the scripts, so left disabled: ${units[*]}" >&2
    return "$status"
}

# The Debian packages installed, one name a line, sorted for comm.
installed_packages() {
    dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\n' | awk '$1 == "ii" { print $2 }' | LC_ALL=C sort
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
