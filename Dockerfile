# One image for every interlude process of docker-compose.yml: migrate, worker, beat, flower, web.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md beat_schedule.py ./
COPY models ./models
COPY statemachine ./statemachine
COPY worker ./worker
COPY examples ./examples
RUN pip install --no-cache-dir . \
    && useradd --create-home --uid 1000 interlude

# Celery refuses to be comfortable as root; beat keeps its schedule file in the home folder.
USER interlude
WORKDIR /home/interlude
CMD ["interlude", "--help"]
