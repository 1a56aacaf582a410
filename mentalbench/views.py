from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static

from annotation.roles import CLINICIAN, RESEARCHER, has_role, is_admin


@login_required
def home(request: HttpRequest) -> HttpResponse:
    # Each role lands on its own work: admins manage, clinicians rate, researchers analyse.
    user = request.user
    if is_admin(user):
        return redirect("annotation:manage")
    if has_role(user, CLINICIAN):
        return redirect("annotation:queue")
    if has_role(user, RESEARCHER):
        return redirect("/analysis/")
    return render(request, "home.html")


def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok", "database": connection.vendor})


def favicon(request: HttpRequest) -> HttpResponse:
    # Resolved per request, not at import: a hashed static storage names the file only once
    # collectstatic has run.
    return redirect(static("favicon.ico"), permanent=True)
