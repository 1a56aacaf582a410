# One image for every MentalBench process (web, Celery workers for runs and upkeep, beat,
# one-shot migrations).
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTHONPATH=/app PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# Dependencies first, so a code change does not reinstall them. The code itself runs from /app
# (PYTHONPATH), where settings also find templates/ and static/.
# Exactly the locked versions, hashes checked (docs/dependencies.md).
COPY requirements.lock ./
RUN pip install --upgrade pip && pip install --require-hashes -r requirements.lock

COPY . .
# Static files are collected into the image; the key is a throwaway for this one command.
RUN SECRET_KEY=collectstatic-only-not-a-real-key-0123456789abcdefghijklmnop python manage.py collectstatic --noinput -v0 \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin mentalbench \
    && mkdir -p /app/media /var/lib/mentalbench \
    && chown mentalbench /app/media /var/lib/mentalbench

# The application never runs as root.
USER mentalbench
EXPOSE 8000
CMD ["gunicorn", "mentalbench.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--worker-class", "gthread", "--threads", "8", "--timeout", "120"]
