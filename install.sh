#!/usr/bin/env bash
# Install everything solo-diet needs into the active Python (or $PYTHON):
#   torch + torchvision, solo-learn `main` from its git source, solo-diet itself (editable, with test
#   extras) and the Animal-MNIST data package used by `solo-diet demo`.
# solo-learn source: $SOLO_LEARN_SRC if set, else /opt/solo-learn if present, else ./.solo-learn: a
# writable copy of ../shared/solo-learn where that folder exists beside the repository, otherwise a
# fresh git clone of https://github.com/vturrisi/solo-learn. PyPI's solo-learn (1.0.2, 2021) is never used.
set -euo pipefail
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
pip_install() { "$PYTHON" -m pip install --quiet --disable-pip-version-check "$@"; }

pip_install ${TORCH_SPEC:-torch==2.14.1 torchvision==0.29.1}
# lightning 2.1.2 and torchmetrics 0.11 import pkg_resources at run time; setuptools 81+ dropped it.
pip_install 'setuptools>=77.0.3,<81' wheel

SOLO_LEARN_SRC=${SOLO_LEARN_SRC:-}
if [ -z "$SOLO_LEARN_SRC" ] && [ -d /opt/solo-learn ]; then SOLO_LEARN_SRC=/opt/solo-learn; fi
if [ -z "$SOLO_LEARN_SRC" ]; then
  SOLO_LEARN_SRC="$HERE/.solo-learn"
  if [ ! -d "$SOLO_LEARN_SRC" ] && [ -d "$HERE/../shared/solo-learn" ]; then
    cp -R "$HERE/../shared/solo-learn" "$SOLO_LEARN_SRC" && chmod -R u+w "$SOLO_LEARN_SRC"
  fi
  [ -d "$SOLO_LEARN_SRC" ] || git clone --depth 1 https://github.com/vturrisi/solo-learn "$SOLO_LEARN_SRC"
fi
echo "install.sh: solo-learn from $SOLO_LEARN_SRC"
# solo-learn's setup.py imports pkg_resources: build without isolation, with the setuptools above.
pip_install --no-build-isolation --use-pep517 -e "$SOLO_LEARN_SRC"

pip_install --no-build-isolation -e "$HERE[test,report]"
# animal-mnist declares tensorflow, which reading its bundled files does not need.
pip_install --no-deps animal-mnist==0.4
"$PYTHON" -c "import solo_diet, solo.methods as m; assert 'diet' in m.METHODS; print('install.sh: solo-diet', solo_diet.__version__, 'registered in solo-learn')"
