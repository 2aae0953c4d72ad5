#!/usr/bin/env bash
# photos.sh - build a real-photo ImageFolder dataset from the wallpapers
# of Debian packages (benchmarks and tests of the JPEG path want real
# photos: procedural images compress and decode unlike camera pictures).
#
#   scripts/photos.sh OUT COUNT [WxH] [CLASSES]
#
# Installs the wallpaper packages when they are missing (as install-deps.sh
# does: apt-get, sudo when not root), then cuts COUNT crops out of the
# wallpapers (seeded positions and scales; sides jittered by up to 10%
# around WxH, default 500x375), resized with Pillow and written as
# quality-90 JPEGs (4:2:0) to OUT/classNNN/NNNNNN.jpg, CLASSES folders
# (default 10). Deterministic: the same packages give the same files.
# Uses Debian's /usr/bin/python3 (PIL).
set -euo pipefail
out=${1:?usage: photos.sh OUT COUNT [WxH] [CLASSES]}
count=${2:?usage: photos.sh OUT COUNT [WxH] [CLASSES]}
size=${3:-500x375}
classes=${4:-10}
PKGS=(plasma-workspace-wallpapers gnome-backgrounds)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "photos: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
    { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; }
fi
/usr/bin/python3 - "$out" "$count" "$size" "$classes" <<'PY'
import os, random, sys
from PIL import Image
Image.MAX_IMAGE_PIXELS = None
out, count, size, classes = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
tw, th = (int(v) for v in size.split("x"))
srcs = []
for root in ("/usr/share/wallpapers", "/usr/share/backgrounds"):
    for d, _, fs in os.walk(root):
        for f in fs:
            if f.lower().endswith((".jpg", ".jpeg", ".png")):
                srcs.append(os.path.join(d, f))
srcs.sort()
if not srcs:
    sys.exit("photos: no wallpapers under /usr/share/wallpapers or /usr/share/backgrounds")
rng = random.Random(20261126)
imgs = {}
for i in range(count):
    path = srcs[i * len(srcs) // count]  # each wallpaper loaded once
    if path not in imgs:
        imgs.clear()
        imgs[path] = Image.open(path).convert("RGB")
    im = imgs[path]
    w = max(16, int(tw * rng.uniform(0.9, 1.1)))
    h = max(16, int(th * rng.uniform(0.9, 1.1)))
    # a crop of 1/1.2 .. 1/4 of the wallpaper's scale, at a seeded place
    f = min(im.width / w, im.height / h) * rng.uniform(0.25, 0.85)
    cw, ch = max(1, int(w * f)), max(1, int(h * f))
    x, y = rng.randint(0, im.width - cw), rng.randint(0, im.height - ch)
    crop = im.crop((x, y, x + cw, y + ch)).resize((w, h), Image.BICUBIC)
    d = os.path.join(out, "class%03d" % (i % classes))
    os.makedirs(d, exist_ok=True)
    crop.save(os.path.join(d, "%06d.jpg" % i), quality=90)
print("photos: %d photos of about %s from %d wallpapers in %s" % (count, size, len(srcs), out))
PY
