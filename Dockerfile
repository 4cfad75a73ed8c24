# One image for every interlude process of docker-compose.yml: migrate, worker, beat, flower,
# metrics, web. Dependencies are installed in their own layer, from pyproject.toml alone, so a change
# to the source rebuilds only the last layers.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && useradd --create-home --uid 1000 interlude

COPY README.md beat_schedule.py ./
COPY models ./models
COPY statemachine ./statemachine
COPY worker ./worker
COPY examples ./examples
RUN pip install --no-cache-dir --no-deps .

# Celery refuses to be comfortable as root; beat keeps its schedule file in the home folder.
USER interlude
WORKDIR /home/interlude
CMD ["interlude", "--help"]
