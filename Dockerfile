# ultracluster on Ray's official image, for Ray clusters (KubeRay: deploy/rayjob.yaml) or a single machine.
#
#   docker build -t ultracluster:0.1.0-ray2.60.0-py312 .
#   docker run --rm --shm-size=2g ultracluster:0.1.0-ray2.60.0-py312            # smoke scenario, embedded Ray
#
# Token authentication is on for every Ray process in the image (RAY_AUTH_MODE=token): an embedded Ray makes its
# own token (~/.ray/auth_token); a cluster's nodes and clients are given the cluster's token as RAY_AUTH_TOKEN (a
# Kubernetes Secret: KubeRay's authOptions in deploy/rayjob.yaml sets it) or as a file named by
# RAY_AUTH_TOKEN_PATH, e.g. mounted at /home/ray/.ray/auth_token (docs/ray-clusters.md, "Token authentication").
# A node started without a token refuses to start, rather than run a cluster anyone can reach.
#
# The versions agree with pyproject.toml (tests/cluster_ray/test_cluster_packaging.py checks it): Ray is
# the one pyproject pins (ray[default]==2.60.0) and the image's Python is one of its classifiers. KubeRay's
# rayVersion must be this RAY_VERSION too.
ARG RAY_VERSION=2.60.0
ARG PYTHON_VERSION=3.12
ARG PYTHON_TAG=py312
FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-cpu

ARG RAY_VERSION
ARG PYTHON_VERSION

# The image's own non-root user (uid 1000, group users); Ray's processes and the job driver run as it.
USER ray
WORKDIR /home/ray
ENV RAY_AUTH_MODE=token

# A regular (non-editable) install: the operator library ships inside the package
# (ultracluster.operators_library), so nothing is read from the source tree afterwards.
COPY --chown=ray:users pyproject.toml README.md /tmp/ultracluster-src/
COPY --chown=ray:users ultracluster /tmp/ultracluster-src/ultracluster
COPY --chown=ray:users operators /tmp/ultracluster-src/operators
RUN pip install --no-cache-dir /tmp/ultracluster-src \
    && rm -rf /tmp/ultracluster-src \
    && python -c "import sys, ray; assert ray.__version__ == '${RAY_VERSION}', ray.__version__; \
assert '%d.%d' % sys.version_info[:2] == '${PYTHON_VERSION}', sys.version" \
    && cd / && python -c "import ultracluster.operators as o; assert o.load_library(); print(o.LIBRARY_DIR)"

# Ready scenarios, for `ultracluster run /home/ray/scenarios/<name>.yaml` (deploy/rayjob.yaml uses them).
COPY --chown=ray:users scenarios /home/ray/scenarios
RUN ultracluster validate /home/ray/scenarios/smoke.yaml

CMD ["ultracluster", "run", "/home/ray/scenarios/smoke.yaml", "--out", "/home/ray/runs/smoke"]
