from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("provisioning", "0012_interruptions"),
    ]

    operations = [
        migrations.AddField(
            model_name="disruption",
            name="started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
