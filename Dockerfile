# dxt-archive on Apache Airflow 3.3.2 (Python 3.11).
#
# Extends the official image the documented way: the project is pip-installed as the
# `airflow` user at build time (never through _PIP_ADDITIONAL_REQUIREMENTS, which would
# reinstall it at every container start). See docs/deploy.md.
FROM apache/airflow:3.3.2-python3.11

# Directories owned by airflow:root (group 0, group-writable, setgid) so that containers run
# with another AIRFLOW_UID (always in group 0) can still write. A new named volume mounted
# on /opt/dxt/archive takes this ownership and mode from the image.
USER root
RUN install -d -o airflow -g root -m 2775 /opt/dxt-archive /opt/dxt/archive
USER airflow

# The package and its dependencies (from pyproject.toml). Pinning apache-airflow to the
# image's version keeps pip from upgrading or downgrading Airflow while resolving them.
COPY --chown=airflow:root pyproject.toml README.md LICENSE /opt/dxt-archive/
COPY --chown=airflow:root dxt_core/ /opt/dxt-archive/dxt_core/
# DXT_EXTRAS: optional extras, e.g. "s3" for an s3:// archive root (boto3).
ARG DXT_EXTRAS=""
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" \
    "/opt/dxt-archive${DXT_EXTRAS:+[${DXT_EXTRAS}]}"

# DAGs and plugins baked into the image (docker-compose.yaml bind-mounts ./dags and
# ./plugins over them for development).
COPY --chown=airflow:root dags/ /opt/airflow/dags/
COPY --chown=airflow:root plugins/ /opt/airflow/plugins/

ENV DXT_ARCHIVE_ROOT=/opt/dxt/archive
