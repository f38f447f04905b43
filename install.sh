#!/usr/bin/env bash
# Install everything solo-diet needs into the active Python (or $PYTHON):
#   torch + torchvision, solo-learn `main` from its git source, solo-diet itself (editable, with test
#   and report extras) and the Animal-MNIST data package used by `solo-diet demo`.
# solo-learn source, and only these: $SOLO_LEARN_SRC if set, else ./.solo-learn (reused if there,
# else a writable copy of ../shared/solo-learn where that folder exists beside the repository, else a
# fresh git clone of https://github.com/vturrisi/solo-learn). The choice is printed. PyPI's
# solo-learn (1.0.2, 2021) is never used. Each step says what it installs; pip itself stays quiet.
set -euo pipefail
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
TORCH_SPEC=${TORCH_SPEC:-torch==2.14.1 torchvision==0.29.1}
STEPS=6
step() { echo "install.sh [$1/$STEPS]: $2"; }
pip_install() { "$PYTHON" -m pip install --quiet --disable-pip-version-check "$@"; }

step 1 "$TORCH_SPEC into $("$PYTHON" -c 'import sys; print(sys.prefix)') (the largest download)"
# shellcheck disable=SC2086 # TORCH_SPEC holds several requirements
pip_install $TORCH_SPEC
step 2 "setuptools<81 and wheel (lightning 2.1.2 and torchmetrics 0.11 import pkg_resources)"
pip_install 'setuptools>=77.0.3,<81' wheel

SOLO_LEARN_SRC=${SOLO_LEARN_SRC:-}
if [ -n "$SOLO_LEARN_SRC" ]; then
  how="SOLO_LEARN_SRC"
else
  SOLO_LEARN_SRC="$HERE/.solo-learn"
  if [ -d "$SOLO_LEARN_SRC" ]; then
    how="the copy from an earlier install.sh"
  elif [ -d "$HERE/../shared/solo-learn" ]; then
    how="a writable copy of $(cd "$HERE/../shared/solo-learn" && pwd)"
    cp -R "$HERE/../shared/solo-learn" "$SOLO_LEARN_SRC" && chmod -R u+w "$SOLO_LEARN_SRC"
  else
    how="a git clone of https://github.com/vturrisi/solo-learn"
    git clone --quiet --depth 1 https://github.com/vturrisi/solo-learn "$SOLO_LEARN_SRC"
  fi
fi
[ -d "$SOLO_LEARN_SRC" ] || { echo "install.sh: SOLO_LEARN_SRC=$SOLO_LEARN_SRC is not a folder" >&2; exit 2; }
step 3 "solo-learn main, editable, from $SOLO_LEARN_SRC ($how; SOLO_LEARN_SRC=DIR picks another)"
# solo-learn's setup.py imports pkg_resources: build without isolation, with the setuptools above.
pip_install --no-build-isolation --use-pep517 -e "$SOLO_LEARN_SRC"

step 4 "solo-diet, editable, from $HERE with its test and report extras (pytest, ruff, scikit-learn, scipy, matplotlib)"
pip_install --no-build-isolation -e "$HERE[test,report]"
step 5 "animal-mnist 0.4, the data of \`solo-diet demo\` (without its unused tensorflow)"
pip_install --no-deps animal-mnist==0.4
step 6 "checking that solo-learn sees the plugin methods"
"$PYTHON" -c "import solo_diet, solo.methods as m; assert 'diet' in m.METHODS; print('install.sh: solo-diet', solo_diet.__version__, 'registered in solo-learn')"
