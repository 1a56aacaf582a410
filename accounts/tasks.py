"""Celery tasks of the accounts app: thin, JSON arguments only; the work is in accounts.services.

The forgot-password e-mail is sent here, on the upkeep worker, and never from the web request:
the request's answer then takes the same time whether or not the address belongs to an account.
"""

from smtplib import SMTPException

from celery import shared_task

from . import services


@shared_task(
    ignore_result=True,
    # A relay that is briefly unreachable: try again a little later, three times at most.
    autoretry_for=(SMTPException, ConnectionError, TimeoutError),
    retry_backoff=10,
    max_retries=3,
)
def password_reset_mail_send(email: str) -> None:
    """E-mail a password link to each account that may reset its password by `email`; nothing
    to an address no account has.

    Dies with its worker: the message is redelivered (acks_late) and the link sent again,
    which is harmless (each link works once, and any use voids the others).
    """
    services.password_reset_mail_send(email=email)
