# One image for every interlude process of docker-compose.yml: migrate, worker, beat, flower,
# metrics, web. Dependencies are installed in their own layer, pinned by deploy/requirements.lock
# (`make lock`), so a rebuild gets the versions the tests ran with and a change to the source
# rebuilds only the last layers.
FROM python:3.11.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY deploy/requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir -r /tmp/requirements.lock \
    && useradd --create-home --uid 1000 interlude

COPY pyproject.toml README.md beat_schedule.py ./
COPY models ./models
COPY statemachine ./statemachine
COPY worker ./worker
COPY examples ./examples
RUN pip install --no-cache-dir --no-deps .

# Celery refuses to be comfortable as root; beat keeps its schedule file in the home folder.
USER interlude
WORKDIR /home/interlude
CMD ["interlude", "--help"]
