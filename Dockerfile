# The epochq image: the engine, the console and every `epochq` command, with the example handlers.
# docker-compose.yml runs it as `topics` (once), `engine` and `console`; the entry point is `epochq`,
# so a service's command is the arguments: ["engine", "run", "examples.handlers:app"].
# Your own handlers: build FROM this image, COPY your package in, and name it in the engine's command.
FROM python:3.11-slim

WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTHONPATH=/app \
    EPOCHQ_STATE_DIR=/var/lib/epochq
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY projections ./projections
COPY schemas ./schemas
RUN pip install --no-cache-dir . && useradd --system --home-dir /var/lib/epochq --create-home epochq
COPY examples ./examples

USER epochq
ENTRYPOINT ["epochq"]
CMD ["--help"]
