"""Admin pages for webhooks: register a URL for chosen events (its signing secret shown once),
pause or delete it, and read each delivery's attempts and the receiver's answers."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts.roles import ADMIN, role_required

from .admin_selectors import webhook_deliveries, webhooks_listed
from .forms import WebhookForm
from .models import Webhook
from .services.webhooks import webhook_create, webhook_delete, webhook_set_enabled


@role_required(ADMIN)
def webhooks(request: HttpRequest) -> HttpResponse:
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        hook, secret = webhook_create(
            url=form.cleaned_data["url"],
            events=form.cleaned_data["events"],
            study=form.cleaned_data["study"],
            created_by=request.user,
        )
        # The secret is in this answer only: it is never shown again.
        return render(
            request, "annotation/manage/webhook_created.html", {"hook": hook, "secret": secret}
        )
    return render(
        request, "annotation/manage/webhooks.html", {"form": form, "hooks": webhooks_listed()}
    )


@role_required(ADMIN)
def webhook_detail(request: HttpRequest, pk: int) -> HttpResponse:
    hook = get_object_or_404(Webhook.objects.select_related("study"), pk=pk)
    context = {"hook": hook, "deliveries": webhook_deliveries(webhook=hook)}
    return render(request, "annotation/manage/webhook.html", context)


@require_POST
@role_required(ADMIN)
def webhook_toggle(request: HttpRequest, pk: int) -> HttpResponse:
    hook = get_object_or_404(Webhook, pk=pk)
    webhook_set_enabled(webhook=hook, enabled=not hook.enabled)
    messages.success(request, "Sending again." if hook.enabled else "Paused: events are not sent.")
    return redirect("annotation:manage_webhook", pk=hook.pk)


@require_POST
@role_required(ADMIN)
def webhook_remove(request: HttpRequest, pk: int) -> HttpResponse:
    webhook_delete(webhook=get_object_or_404(Webhook, pk=pk))
    messages.success(request, "Webhook deleted.")
    return redirect("annotation:manage_webhooks")
