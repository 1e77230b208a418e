#!/bin/sh
# npm-fetch.sh PACKAGE VERSION INTEGRITY DEST: download a package tarball from
# the npm registry with curl, check its SRI (sha512-...) integrity when one
# is given, and unpack it into DEST (the tarball's package/ prefix removed).
# Used by Dockerfile.base before node/npm exist in the image.
set -eu
pkg=$1 version=$2 sri=$3 dest=$4
registry=${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}
registry=${registry%/}
base=${pkg##*/}
tgz=/tmp/npm-fetch-$base-$version.tgz
curl -fsSL --retry 3 --retry-delay 2 -o "$tgz" "$registry/$pkg/-/$base-$version.tgz"
if [ -n "$sri" ]; then
    got=$(python3 -c 'import base64,hashlib,sys; print("sha512-"+base64.b64encode(hashlib.sha512(open(sys.argv[1],"rb").read()).digest()).decode())' "$tgz")
    if [ "$got" != "$sri" ]; then
        echo "npm-fetch: $pkg@$version integrity mismatch: want $sri, got $got" >&2
        exit 1
    fi
fi
tar -xzf "$tgz" -C "$dest" --strip-components=1 --no-same-owner
rm -f "$tgz"
