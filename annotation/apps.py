from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    name = "annotation"
    verbose_name = "Studies, responses and ratings"

    def ready(self) -> None:
        from annotation import lookups  # noqa: F401  registers JSONField's has_element
