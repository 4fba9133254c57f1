#!/usr/bin/env bash
# Builds the CPU and GPU images with whichever engine is installed: docker (with a running
# daemon), podman or buildah. Called as `./dev images`:
#
#   ./dev images [--local-base | --pinned-base] [--push REGISTRY] [--prune] [cpu] [gpu]
#
# Tags: REGISTRY/gpupipe-{cpu,gpu}:<version>-<commit> (python -m pipelines.version), with
# -dirty when what the images hold has uncommitted changes. REGISTRY is --push's, else
# $REGISTRY, else localhost/gpupipe. --push pushes both and prints their digests.
# --local-base: no registry access (this machine, CI, air-gapped users): the base is made from
# Debian packages (mmdebstrap: bookworm's python3.11) and the Beam SDK stage is a local
# stand-in (images/local/); only the Dockerfiles' build args change. The last line printed
# for each image is `built <ref> <size>`. --prune: first remove the final-stage images of
# earlier builds, tagged or not, other than the ones about to be built (images/prune.py; the
# builder stages, the cache, stay); `./dev image-test` always does.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-$(command -v python3.11 || command -v python3)}
LOCAL_BASE_IMAGE=localhost/gpupipe-base:bookworm-python3.11
BEAM_STANDIN_IMAGE=localhost/gpupipe-beam-sdk-standin:2.61.0
local_base=0 push="" prune=0 targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --local-base) local_base=1 ;;
        --pinned-base) local_base=0 ;;  # the default: the Dockerfiles' own bases
        --prune) prune=1 ;;
        --push) push=${2:?"--push needs a registry, e.g. --push europe-docker.pkg.dev/my-project/gpupipe"}; shift ;;
        cpu|gpu) targets+=("$1") ;;
        *) echo "error: ./dev images: unknown argument '$1'; use [--local-base | --pinned-base] [--push REGISTRY] [--prune] [cpu] [gpu]" >&2; exit 2 ;;
    esac
    shift
done
[ ${#targets[@]} -gt 0 ] || targets=(cpu gpu)

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then ENGINE=docker
elif command -v podman >/dev/null 2>&1; then ENGINE=podman
elif command -v buildah >/dev/null 2>&1; then ENGINE=buildah
else
    echo "error: no container engine: install Docker, or podman/buildah (Debian: apt-get install podman buildah runc)" >&2
    exit 1
fi
if [ "$ENGINE" != docker ] && [ -z "${CONTAINERS_CONF:-}" ] && [ "$local_base" = 1 ]; then
    # runc and explicit ulimits: root without CAP_SYS_RESOURCE and hybrid cgroups (this machine)
    export CONTAINERS_CONF=$PWD/images/local/containers.conf
fi

TAG=$("$PY" -m pipelines.version)
dirty=$("$PY" -m pipelines.version --dirty)
if [ -n "$dirty" ]; then
    TAG="$TAG-dirty"
    echo "note: uncommitted changes to what the images hold ($(echo "$dirty" | head -3 | tr '\n' ' ')…): tagging $TAG" >&2
fi
REGISTRY=${push:-${REGISTRY:-localhost/gpupipe}}

build_args=(--build-arg "IMAGE_TAG=$TAG")
engine_build=("$ENGINE" build)
[ "$ENGINE" = buildah ] && engine_build=(buildah build --layers)
if [ "$ENGINE" != docker ]; then
    # pip behind a TLS-intercepting proxy: the host's CA bundle, mounted for the build only
    ca=${PIP_CERT:-${REQUESTS_CA_BUNDLE:-${SSL_CERT_FILE:-}}}
    if [ -n "$ca" ] && [ -f "$ca" ]; then
        engine_build+=(-v "$ca:/run/gpupipe-ca.crt:ro")
        build_args+=(--build-arg PIP_CERT=/run/gpupipe-ca.crt)
    fi
fi

image_exists() {
    case "$ENGINE" in
        docker) docker image inspect "$1" >/dev/null 2>&1 ;;
        podman) podman image exists "$1" ;;
        buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    esac
}

if [ "$local_base" = 1 ]; then
    engine_build+=(--pull=never)
    if ! image_exists "$LOCAL_BASE_IMAGE"; then
        command -v mmdebstrap >/dev/null 2>&1 || {
            echo "error: --local-base needs mmdebstrap (Debian: apt-get install mmdebstrap)" >&2; exit 1; }
        echo "making $LOCAL_BASE_IMAGE from Debian packages (mmdebstrap, python3.11)" >&2
        rootfs=$(mktemp --suffix=.tar)
        trap 'rm -f "$rootfs"' EXIT
        mmdebstrap --quiet --variant=minbase --include=python3.11,python3.11-venv,ca-certificates bookworm "$rootfs"
        if [ "$ENGINE" = buildah ]; then
            ctr=$(buildah from scratch) && mnt=$(buildah mount "$ctr") && tar -xf "$rootfs" -C "$mnt" \
                && buildah config --cmd /bin/bash "$ctr" && buildah commit --quiet "$ctr" "$LOCAL_BASE_IMAGE" \
                && buildah rm "$ctr" >/dev/null
        else
            "$ENGINE" import --change 'CMD ["/bin/bash"]' "$rootfs" "$LOCAL_BASE_IMAGE" >/dev/null
        fi
    fi
    "${engine_build[@]}" --quiet --build-arg "BASE=$LOCAL_BASE_IMAGE" -f images/local/beam-sdk.Containerfile \
        -t "$BEAM_STANDIN_IMAGE" . >/dev/null
    build_args+=(--build-arg "BASE=$LOCAL_BASE_IMAGE")
fi

size_of() {
    case "$ENGINE" in
        buildah) buildah inspect --type image --format '{{.Docker.Size}}' "$1" 2>/dev/null || echo 0 ;;
        *) "$ENGINE" image inspect --format '{{.Size}}' "$1" ;;
    esac
}

if [ "$prune" = 1 ] && [ "$ENGINE" != buildah ]; then
    "$PY" images/prune.py --engine "$ENGINE" --keep "$REGISTRY/gpupipe-cpu:$TAG" --keep "$REGISTRY/gpupipe-gpu:$TAG" >&2
fi

for target in "${targets[@]}"; do
    ref="$REGISTRY/gpupipe-$target:$TAG"
    start=$SECONDS
    echo "building $ref with $ENGINE (images/$target/Dockerfile)" >&2
    target_args=()  # the CPU image's Beam SDK stage, a stand-in with --local-base
    [ "$target" = cpu ] && [ "$local_base" = 1 ] && target_args=(--build-arg "BEAM_SDK=$BEAM_STANDIN_IMAGE")
    "${engine_build[@]}" "${build_args[@]}" "${target_args[@]}" -f "images/$target/Dockerfile" -t "$ref" . >&2
    size=$(size_of "$ref")
    echo "built $ref $(awk -v b="$size" 'BEGIN { printf "%.2f GB", b / 1e9 }') in $((SECONDS - start)) s"
    if [ -n "$push" ]; then
        if [ "$ENGINE" = docker ]; then
            docker push "$ref" >&2
            digest=$(docker image inspect --format '{{index .RepoDigests 0}}' "$ref")
        else
            digestfile=$(mktemp)
            "$ENGINE" push --digestfile "$digestfile" "$ref" >&2
            digest="$REGISTRY/gpupipe-$target@$(cat "$digestfile")"
            rm -f "$digestfile"
        fi
        echo "pushed $ref = $digest"
    fi
done
if [ -n "$push" ]; then
    echo "next: set images.registry: $push in your config (or images.cpu / images.gpu to the digests above), then gpupipe compile" >&2
fi
