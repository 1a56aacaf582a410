import io

from django.core.management import call_command

from annotation.models import Assignment


def test_seed_demo_assigns_every_demo_conversation_to_both_clinicians_once(db):
    call_command("seed_demo", stdout=io.StringIO())
    call_command("seed_demo", stdout=io.StringIO())  # idempotent
    demo = Assignment.objects.filter(conversation__study__name="Demo study")
    assert demo.count() == 12
    assert sorted(set(demo.values_list("rater__name", flat=True))) == ["clinician1", "clinician2"]
    assert all(a.items.count() == 10 for a in demo)
