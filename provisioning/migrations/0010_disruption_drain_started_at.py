import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("provisioning", "0009_clusterpdb"),
    ]

    operations = [
        migrations.AddField(
            model_name="disruption",
            name="drain_started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="disruption",
            name="planned_at",
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now),
        ),
    ]
