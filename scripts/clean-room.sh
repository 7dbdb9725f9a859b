#!/usr/bin/env bash
# scripts/clean-room.sh: proves the README's two commands on a fresh Debian 12
# and a fresh Debian 13. Builds a minimal root of each (debootstrap
# --variant=minbase bookworm / trixie, from the mirror this machine's apt
# sources name, with those sources pointed at the suite), bind-mounts the host's CUDA
# toolkit read-only where there is one (CUDA comes from NVIDIA, not Debian),
# copies a clean `git clone` of HEAD into it and runs the commands of the
# README's first code block there, in order, as root, with a plain
# environment. Prints one summary line per command; exits non-zero if any
# failed. Each minbase root is cached as a tarball outside the repository;
# everything installed on top of it is thrown away after each run.
#
#   scripts/clean-room.sh              both README commands (quickstart, tests)
#                                      in both suites, one after the other
#   scripts/clean-room.sh --suite S    bookworm (Debian 12) or trixie (Debian 13)
#   scripts/clean-room.sh --only test  only the command that runs the tests (CI)
#   scripts/clean-room.sh --keep       keep the root afterwards (path printed)
#   XRUN_CLEAN_ROOM_CACHE  where the minbase tarballs and the downloaded .deb
#                          files live (default /var/cache/xrun-clean-room)
#   XRUN_CLEAN_ROOM_DIR    where the root is unpacked (default: a new folder
#                          under /var/tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

only="" keep=0 suite=""
args=("$@")
while (($#)); do
  case "$1" in
    --only) only="${2:?--only needs quickstart or test}"; shift 2 ;;
    --suite) suite="${2:?--suite needs bookworm or trixie}"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "clean-room: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$only" in ""|quickstart|test) ;; *) echo "clean-room: --only takes quickstart or test, not '$only'" >&2; exit 2 ;; esac
case "$suite" in ""|bookworm|trixie) ;; *) echo "clean-room: --suite takes bookworm or trixie, not '$suite'" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "clean-room: must run as root (debootstrap, chroot, mounts)" >&2; exit 2; }

# No suite named: each in turn, by running this script once per suite.
if [ -z "$suite" ]; then
  status=0
  for s in bookworm trixie; do "$0" "${args[@]}" --suite "$s" || status=1; done
  exit "$status"
fi

say() { echo "clean-room ($suite): $*"; }

# The README's two commands: the lines of its first ```sh block, comments cut.
mapfile -t commands < <(awk '/^```sh/{f=1;next} f&&/^```/{exit} f' README.md | sed 's/[[:space:]]*#.*$//' | sed '/^[[:space:]]*$/d')
((${#commands[@]} == 2)) || { echo "clean-room: expected two commands in README.md's first sh block, found ${#commands[@]}" >&2; exit 1; }

# The Debian mirror the machine's apt sources name (deb822 or one-line form).
mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
mirror="${mirror:-http://deb.debian.org/debian}"

if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

cache="${XRUN_CLEAN_ROOM_CACHE:-/var/cache/xrun-clean-room}"
tarball="$cache/$suite-minbase.tar"
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  say "debootstrap --variant=minbase $suite from $mirror (cached in $tarball afterwards)"
  fresh=$(mktemp -d /var/tmp/xrun-minbase.XXXXXX)
  debootstrap --variant=minbase "$suite" "$fresh" "$mirror" >"$cache/debootstrap-$suite.log" 2>&1 \
    || { echo "clean-room: debootstrap failed; see $cache/debootstrap-$suite.log" >&2; rm -rf "$fresh"; exit 1; }
  rm -rf "$fresh"/var/cache/apt/archives/*.deb
  tar -C "$fresh" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
  rm -rf "$fresh"
fi

root="${XRUN_CLEAN_ROOM_DIR:-$(mktemp -d /var/tmp/xrun-clean-room.XXXXXX)}"
mkdir -p "$root"
mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -R "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" 2>/dev/null || true
  done
  if ((keep)); then say "root kept at $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

tar -C "$root" -xf "$tarball"
# "/" as on any Debian machine: the tarball's "." carries mktemp's 0700,
# which locks every user but root out of the whole root (package scripts
# that run as their own user, munge's, then fail; apt cannot drop to _apt).
chmod 755 "$root"
# Apt and the network as a fresh machine of this kind has them: its apt
# sources, resolver, local CA certificates (Debian's ca-certificates adds
# them to the bundle when it is installed) and pip's configuration. Nothing
# else is taken from the host: no package, no library, no tool.
rm -f "$root/etc/apt/sources.list"
cp -a /etc/apt/sources.list.d/. "$root/etc/apt/sources.list.d/" 2>/dev/null || true
[ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$root/etc/apt/sources.list"
find "$root/etc/apt/sources.list.d" -name '*disabled*' -delete
# The host's sources name its own release; the root gets the same mirrors for
# its suite (bookworm-updates -> trixie-updates, bookworm-security -> ...).
host_suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [ -n "$host_suite" ] && [ "$host_suite" != "$suite" ]; then
  find "$root/etc/apt" -maxdepth 2 \( -name '*.sources' -o -name '*.list' \) -type f \
    -exec sed -i "s/\b$host_suite\b/$suite/g" {} +
fi
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$root/etc/ssl/certs" && cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
fi
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -aL /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
[ -f /etc/pip.conf ] && cp -L /etc/pip.conf "$root/etc/pip.conf"
# The variables that point tools at those certificates and registries.
netenv=()
for v in PIP_CERT PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT \
         SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE \
         http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!v:-}" ] && netenv+=("$v=${!v}")
done

bind() {  # bind SRC DEST [ro]
  mkdir -p "$root$2"
  mount --bind "$1" "$root$2"; mounts+=("$root$2")
  [ "${3:-}" = ro ] && mount -o remount,bind,ro "$root$2"
  return 0
}
mount -t proc proc "$root/proc"; mounts+=("$root/proc")
mount -t sysfs sysfs "$root/sys"; mounts+=("$root/sys")
# The cgroup hierarchy, as systemd mounts it on any Debian machine (slurmd
# refuses to start without it: the Slurm tests' cluster needs it).
if mountpoint -q /sys/fs/cgroup; then
  mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"; mounts+=("$root/sys/fs/cgroup")
fi
bind /dev /dev
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" 2>/dev/null && mounts+=("$root/dev/pts") || true
mount -t tmpfs tmpfs "$root/dev/shm"; mounts+=("$root/dev/shm")

# Downloaded .deb files, kept per suite between runs (as a local mirror or
# apt proxy would keep them): apt still fetches a fresh index, checks every
# package against it and installs each one into the empty root; only the
# download of a file it has fetched before is saved.
mkdir -p "$cache/apt-archives-$suite/partial"
bind "$cache/apt-archives-$suite" /var/cache/apt/archives

# The CUDA toolkit, read-only, at the same path, with its /usr/local/cuda link.
if [ -e /usr/local/cuda ]; then
  cuda=$(readlink -f /usr/local/cuda)
  bind "$cuda" "$cuda" ro
  [ "$cuda" = /usr/local/cuda ] || ln -sfn "$cuda" "$root/usr/local/cuda"
  say "CUDA toolkit $cuda bind-mounted read-only"
fi

# A clean clone of HEAD (committed work only).
mkdir -p "$root/work"
git clone --quiet --no-hardlinks "$repo" "$root/work/xrun"
say "clone of $(git -C "$repo" rev-parse --short=12 HEAD) in $root/work/xrun"

status=0
summary=()
for cmd in "${commands[@]}"; do
  case "$only:$cmd" in
    test:*quickstart*|quickstart:*test.sh*) continue ;;
  esac
  say "running '$cmd'"
  start=$(date +%s)
  rc=0
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 CI="${CI:-}" "${netenv[@]}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /work/xrun && $cmd" </dev/null || rc=$?
  end=$(date +%s)
  summary+=("$(printf 'clean-room (%s): %-26s exit %d, %.1f min' "$suite" "$cmd" "$rc" "$(awk -v s=$((end - start)) 'BEGIN{print s/60}')")")
  ((rc == 0)) || status=1
done
printf '%s\n' "${summary[@]}"
exit "$status"
