#!/bin/sh
# Get the Dockerfile's base image (its first FROM, e.g. debian:12.8-slim) into podman: pulled
# when a registry serves it, else made on this host: Debian 12 bootstrapped with debootstrap,
# trimmed as Debian's "-slim" images are (no manuals, docs or translations; apt keeps no
# downloaded packages), and imported under the FROM name, so `podman build` finds it locally.
#
#   sh examples/podman/base-image.sh [TARBALL]
#
# Run as root (debootstrap), from the repository. Nothing happens when podman already has the
# image. TARBALL (optional): a file to keep the root filesystem in; when it exists it is imported
# as it is, with no download (CI keeps one in its cache). Needs debootstrap and a Debian mirror
# (MIRROR, default http://deb.debian.org/debian).
set -eu

dockerfile="$(dirname "$0")/../../Dockerfile"
name="$(sed -n 's/^FROM \([^ ]*\).*/\1/p' "$dockerfile" | head -n 1)"
case "$name" in
    */*) ;;
    *) name="docker.io/library/$name" ;;  # the name podman resolves a short Docker Hub name to
esac
if podman image exists "$name"; then
    echo "base image $name: already here"
    exit 0
fi
if timeout 120 podman pull -q "$name" >/dev/null 2>&1; then
    echo "base image $name: pulled"
    exit 0
fi
tarball="${1:-}"
if [ -z "$tarball" ] || [ ! -s "$tarball" ]; then
    rootfs="$(mktemp -d)"
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase bookworm "$rootfs" "${MIRROR:-http://deb.debian.org/debian}" >/dev/null
    # what makes Debian's images "-slim": dpkg leaves these paths out of every later install too
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
    # apt deletes the packages it downloaded once they are installed (as in Debian's images)
    cat >"$rootfs/etc/apt/apt.conf.d/slim" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
EOF
    # the suites Debian's images follow (point releases and security updates), not bookworm alone
    rm -f "$rootfs/etc/apt/sources.list"
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: ${MIRROR:-http://deb.debian.org/debian}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    # debootstrap copied this host's name and resolver; the engine provides both at run time
    rm -f "$rootfs/etc/hostname" && : >"$rootfs/etc/resolv.conf"
    find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/groff/* "$rootfs"/usr/share/info/* \
        "$rootfs"/usr/share/lintian/* "$rootfs"/usr/share/locale/* \
        "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* "$rootfs"/tmp/*
    if [ -n "$tarball" ]; then
        mkdir -p "$(dirname "$tarball")"
        tar -C "$rootfs" --numeric-owner -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    else
        tarball="$rootfs.tar"
        tar -C "$rootfs" --numeric-owner -cf "$tarball" .
        trap 'rm -rf "$rootfs" "$tarball"' EXIT
    fi
fi
podman import -q --change 'CMD ["bash"]' "$tarball" "$name" >/dev/null
echo "base image $name: made with debootstrap ($(podman image inspect -f '{{.Size}}' "$name") bytes)"
