"""karpweb settings: every knob comes from the environment, with defaults that work
straight after a checkout (SQLite under var/, the embedded Redis that ``make run``
starts, the simulated cluster and the simulated AWS).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from karpweb.env import env_bool, env_float, env_int, env_list, env_str
from karpweb.redisconf import sentinels

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("KARPWEB_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
# A key generated per checkout keeps sessions valid across restarts without a secret in git.
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    from karpweb.secret import local_secret_key

    SECRET_KEY = local_secret_key(VAR_DIR)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "csp",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "provisioning",
]

MIDDLEWARE = [
    "karpweb.logs.RequestIdMiddleware",
    # Before anything that checks the Host header: Prometheus scrapes a pod by its IP.
    "provisioning.observability.views.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "karpweb.urls"
WSGI_APPLICATION = "karpweb.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "provisioning.ui.access.context",
            ],
        },
    },
]

# SQLite by default, so a checkout runs without a database server; DATABASE_URL for
# PostgreSQL in CI and production.
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'karpweb.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
        # A kept connection that died (a failover, pgbouncer restarting) is replaced before
        # use instead of failing the request or task that would have used it.
        conn_health_checks=True,
        # PgBouncer in transaction mode cannot keep a server-side cursor between transactions.
        disable_server_side_cursors=env_bool("DATABASE_DISABLE_SERVER_SIDE_CURSORS", False),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web process read while a worker writes.
    DATABASES["default"].setdefault("OPTIONS", {})["init_command"] = (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
    )
    DATABASES["default"]["OPTIONS"]["timeout"] = 20
    # Take the write lock when a transaction begins: a read-then-write transaction of one
    # worker cannot then fail with "database is locked" against another's (SQLite cannot
    # upgrade a read lock while another writer waits); it waits up to the timeout instead.
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
    # Tests use a file, not memory, so a Celery worker process can open the same database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-karpweb.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Unset means "not configured": `make run` starts the embedded Redis and sets it for
# everything it launches; tests start one too. A sentinel:// URL names Sentinels, which tell
# every client where the master REDIS_SENTINEL_MASTER is (karpweb/redisconf.py).
REDIS_URL = env_str("REDIS_URL")
REDIS_SENTINEL_MASTER = env_str("REDIS_SENTINEL_MASTER")
REDIS_SENTINELS = sentinels(REDIS_URL, REDIS_SENTINEL_MASTER)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "provisioning:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# The image collects static files at build time into a directory of its own, outside the var
# directory that a writable volume covers at run time.
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "staticfiles")))
# Without collectstatic (a checkout), WhiteNoise serves straight from the finders.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
# STATIC_ROOT exists only after collectstatic (the image); a checkout serves from finders.
warnings.filterwarnings("ignore", message="No directory at")

# Security headers; HTTPS-only cookies when served behind TLS.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Pages load scripts and styles from this origin only: no inline script, no eval (htmx is
# configured in base.html not to need either), so injected markup cannot run.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
        "base-uri": [NONE],
        "object-src": [NONE],
    }
}
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# A manifest larger than this is refused before it is parsed (the Kubernetes API server
# refuses request bodies over 3 MiB).
KARPWEB_MAX_MANIFEST_BYTES = env_int("KARPWEB_MAX_MANIFEST_BYTES", 3 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = KARPWEB_MAX_MANIFEST_BYTES + 64 * 1024

# The REST API: token or session auth, roles per method, throttling per token (the counts
# live in the cache, Redis when REDIS_URL is set, so every web replica shares them).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["provisioning.rest.permissions.ByRole"],
    "DEFAULT_PARSER_CLASSES": [
        "provisioning.rest.formats.JSONManifestParser",
        "provisioning.rest.formats.YAMLManifestParser",
        "provisioning.rest.formats.MergePatchParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "provisioning.rest.formats.YAMLRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": env_str("KARPWEB_API_RATE", "1200/minute")},
    "EXCEPTION_HANDLER": "provisioning.rest.errors.handle",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "karpweb API",
    "DESCRIPTION": "NodePools and EC2NodeClasses as Kubernetes manifests, the cluster as karpweb sees it, "
    "and what-if plans. Authenticate with `Authorization: Token KEY` (manage.py drf_create_token USER).",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "provisioning.rest.schema.add_common_errors",
    ],
    "ENUM_NAME_OVERRIDES": {
        "NodeClaimStateEnum": "provisioning.rest.schema.NODECLAIM_STATES",
        "DisruptionStateEnum": "provisioning.rest.schema.DISRUPTION_STATES",
        "PodPhaseEnum": "provisioning.rest.schema.POD_PHASES",
    },
}
if REDIS_SENTINELS:
    CACHES = {
        "default": {
            "BACKEND": "karpweb.redisconf.SentinelRedisCache",
            "LOCATION": [REDIS_URL],
            "OPTIONS": {"master": REDIS_SENTINEL_MASTER},
        }
    }
elif REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

KARPWEB_BATCH_IDLE_SECONDS = env_float("KARPWEB_BATCH_IDLE_SECONDS", 1.0)
KARPWEB_BATCH_MAX_SECONDS = env_float("KARPWEB_BATCH_MAX_SECONDS", 10.0)
# How long before the window closes the run is read and solved, to be recorded at the close
# if nothing changed meanwhile: a 1,000-pod run takes about half a second to prepare. At most
# three quarters of the idle window; 0 reads and solves only once it closed.
KARPWEB_BATCH_LOOKAHEAD_SECONDS = env_float("KARPWEB_BATCH_LOOKAHEAD_SECONDS", 0.7)
# The cluster: "simulated" (pods and nodes in the database, the embedded default) or
# "kubernetes" (in-cluster, or the kubeconfig in KUBECONFIG).
KARPWEB_CLUSTER = env_str("KARPWEB_CLUSTER", "simulated").strip().lower() or "simulated"
if KARPWEB_CLUSTER not in ("simulated", "kubernetes"):
    raise ImproperlyConfigured(f"KARPWEB_CLUSTER={KARPWEB_CLUSTER!r}: expected simulated or kubernetes")
# The simulated kubelet registers a launched instance as a Node after this many seconds.
KARPWEB_SIM_KUBELET_DELAY_SECONDS = env_float("KARPWEB_SIM_KUBELET_DELAY_SECONDS", 2.0)
# A launched NodeClaim whose node has not registered by then is terminated (upstream: 15 min).
KARPWEB_REGISTRATION_TIMEOUT_SECONDS = env_float("KARPWEB_REGISTRATION_TIMEOUT_SECONDS", 15 * 60)
# A claim left "launching" this long had its worker die mid-call: it is launched again
# (the same ClientToken, so never a second instance).
KARPWEB_LAUNCH_STUCK_SECONDS = env_float("KARPWEB_LAUNCH_STUCK_SECONDS", 120)
# Consolidation may replace spot with cheaper spot only when this is on (as upstream's gate).
KARPWEB_SPOT_TO_SPOT_CONSOLIDATION = env_bool("KARPWEB_SPOT_TO_SPOT_CONSOLIDATION", False)
# How long a disruption round's consolidation simulations may take before single-node
# consolidation stops and goes on next round (upstream times its methods out too).
KARPWEB_CONSOLIDATION_SECONDS = env_float("KARPWEB_CONSOLIDATION_SECONDS", 3.0)
# The SQS queue of interruption events (its name, as upstream's setting; empty: no queue), read
# by one consumer per deployment (``manage.py interruptions``).
KARPWEB_INTERRUPTION_QUEUE = env_str("KARPWEB_INTERRUPTION_QUEUE", "").strip()
# DescribeInstanceStatus every minute (upstream v1.12, always on); dry run: count, act on nothing.
KARPWEB_INSTANCE_STATUS = env_bool("KARPWEB_INSTANCE_STATUS", True)
KARPWEB_INSTANCE_STATUS_DRY_RUN = env_bool("KARPWEB_INSTANCE_STATUS_DRY_RUN", False)
# Node repair (upstream's NodeRepair gate, off by default there too): the conditions that
# make a node unhealthy and for how long, and the share of a NodePool that may be unhealthy
# for repair to act (beyond it the cause is taken to be elsewhere).
KARPWEB_NODE_REPAIR = env_bool("KARPWEB_NODE_REPAIR", False)
KARPWEB_REPAIR_POLICIES = env_str(
    "KARPWEB_REPAIR_POLICIES",
    "Ready=False:30m,Ready=Unknown:30m,AcceleratedHardwareReady=False:10m,StorageReady=False:30m,"
    "NetworkingReady=False:30m,KernelReady=False:30m,ContainerRuntimeReady=False:30m",
)
KARPWEB_REPAIR_MAX_UNHEALTHY = env_str("KARPWEB_REPAIR_MAX_UNHEALTHY", "20%").strip()
# How the solver treats preferences and minValues, and what of kube-scheduler's configuration
# it mirrors: upstream's PREFERENCE_POLICY (Respect|Ignore), MIN_VALUES_POLICY
# (Strict|BestEffort) and SCHEDULER_CONFIG (a YAML/JSON document with
# podTopologySpread.defaultConstraints), under the same names.
PREFERENCE_POLICY = env_str("PREFERENCE_POLICY", "Respect").strip() or "Respect"
if PREFERENCE_POLICY not in ("Respect", "Ignore"):
    raise ImproperlyConfigured(f"PREFERENCE_POLICY={PREFERENCE_POLICY!r}: expected Respect or Ignore")
MIN_VALUES_POLICY = env_str("MIN_VALUES_POLICY", "Strict").strip() or "Strict"
if MIN_VALUES_POLICY not in ("Strict", "BestEffort"):
    raise ImproperlyConfigured(f"MIN_VALUES_POLICY={MIN_VALUES_POLICY!r}: expected Strict or BestEffort")
SCHEDULER_CONFIG = env_str("SCHEDULER_CONFIG", "")
try:
    import yaml as _yaml

    from provisioning.scheduling.defaults import parse_scheduler_config

    DEFAULT_TOPOLOGY_SPREAD = parse_scheduler_config(_yaml.safe_load(SCHEDULER_CONFIG) if SCHEDULER_CONFIG else None)
except (ValueError, _yaml.YAMLError) as exc:
    raise ImproperlyConfigured(f"SCHEDULER_CONFIG: {exc}") from None
# The demo workload (Deployments that scale over time) on the simulated cluster.
KARPWEB_DEMO_WORKLOAD = env_bool("KARPWEB_DEMO_WORKLOAD", False)
# Spend per team: how often the nodes' cost is split over their pods and recorded, and the pod
# label keys it is recorded by besides the namespace (services/allocation.py says why they are
# chosen here rather than every label recorded).
KARPWEB_SPEND_SAMPLE_SECONDS = env_float("KARPWEB_SPEND_SAMPLE_SECONDS", 60.0)
if not 10 <= KARPWEB_SPEND_SAMPLE_SECONDS <= 3600:
    raise ImproperlyConfigured(
        f"KARPWEB_SPEND_SAMPLE_SECONDS={KARPWEB_SPEND_SAMPLE_SECONDS!r}: expected 10 to 3600 seconds"
    )
KARPWEB_SPEND_LABELS = env_list("KARPWEB_SPEND_LABELS", ["team"])
from provisioning.crd.labels import qualified_name_errors as _label_key_errors  # noqa: E402

for _key in KARPWEB_SPEND_LABELS:
    if _label_key_errors(_key):
        raise ImproperlyConfigured(
            f"KARPWEB_SPEND_LABELS: {_key!r} is not a label key: {'; '.join(_label_key_errors(_key))}"
        )
if len(set(KARPWEB_SPEND_LABELS)) != len(KARPWEB_SPEND_LABELS) or len(KARPWEB_SPEND_LABELS) > 10:
    raise ImproperlyConfigured("KARPWEB_SPEND_LABELS: at most 10 label keys, each once (team,app)")

CELERY_BROKER_URL = REDIS_SENTINELS.broker_url() if REDIS_SENTINELS else REDIS_URL or "redis://127.0.0.1:6379/0"
if REDIS_SENTINELS:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"master_name": REDIS_SENTINEL_MASTER}
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 300)

# Celery would replace the handlers below with its own text format; workers log as the rest do.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# "text" reads well in a terminal (`make run`); "json" is one object per line for a log pipeline,
# with the request id or the task on every line (karpweb/logs.py).
KARPWEB_LOG_FORMAT = env_str("KARPWEB_LOG_FORMAT", "text").strip().lower() or "text"
if KARPWEB_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"KARPWEB_LOG_FORMAT={KARPWEB_LOG_FORMAT!r}: expected text or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "karpweb.logs.ContextFilter"}},
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s%(context)s"},
        "json": {"()": "karpweb.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": KARPWEB_LOG_FORMAT, "filters": ["context"]}
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# Metrics (provisioning/observability): /metrics answers Prometheus; with a token set it wants
# `Authorization: Bearer <token>`. Of the web replicas, the one holding a lease in Redis adds the
# cluster's state from the database, so a sum over replicas counts each pod and node once.
KARPWEB_METRICS_TOKEN = env_str("KARPWEB_METRICS_TOKEN")
KARPWEB_METRICS_LEASE_SECONDS = env_float("KARPWEB_METRICS_LEASE_SECONDS", 90.0)
# karpenter_pods_state has a series per pod: at most this many, pending pods first.
KARPWEB_METRICS_MAX_POD_SERIES = env_int("KARPWEB_METRICS_MAX_POD_SERIES", 5000)
# Which gunicorn role this process serves (deploy/gunicorn.conf.py reads the same variable).
KARPWEB_ROLE = env_str("KARPWEB_ROLE", "web").strip().lower() or "web"

# The cloud: "simulated" (default) is the moto server `make run` starts and points boto3 at
# (AWS_ENDPOINT_URL); "aws" is real AWS with the usual credential chain.
KARPWEB_AWS = env_str("KARPWEB_AWS", "simulated").strip().lower() or "simulated"
if KARPWEB_AWS not in ("simulated", "aws"):
    raise ImproperlyConfigured(f"KARPWEB_AWS={KARPWEB_AWS!r}: expected simulated or aws")
AWS_REGION = env_str("AWS_REGION") or env_str("AWS_DEFAULT_REGION", "us-east-1")
KARPWEB_CLUSTER_NAME = env_str("KARPWEB_CLUSTER_NAME", "my-cluster")
KARPWEB_KUBERNETES_VERSION = env_str("KARPWEB_KUBERNETES_VERSION", "1.33")
KARPWEB_CLUSTER_ENDPOINT = env_str("KARPWEB_CLUSTER_ENDPOINT", "")
KARPWEB_CLUSTER_CA_BUNDLE = env_str("KARPWEB_CLUSTER_CA_BUNDLE", "")
# The cluster's service CIDR, which nodeadm needs to configure kubelet's cluster DNS.
KARPWEB_CLUSTER_CIDR = env_str("KARPWEB_CLUSTER_CIDR", "")
# How instances are launched: CreateFleet type instant (as Karpenter) or RunInstances
# with the launch template.
KARPWEB_LAUNCH_API = env_str("KARPWEB_LAUNCH_API", "fleet").strip().lower() or "fleet"
if KARPWEB_LAUNCH_API not in ("fleet", "run-instances"):
    raise ImproperlyConfigured(f"KARPWEB_LAUNCH_API={KARPWEB_LAUNCH_API!r}: expected fleet or run-instances")
# Karpenter's --vm-memory-overhead-percent and --reserved-enis.
KARPWEB_VM_MEMORY_OVERHEAD_PERCENT = env_float("KARPWEB_VM_MEMORY_OVERHEAD_PERCENT", 0.075)
KARPWEB_RESERVED_ENIS = env_int("KARPWEB_RESERVED_ENIS", 0)

# Periodic tasks (celery beat). The catalog of instance types, offerings and prices is
# rebuilt from the cloud every 12 hours, as Karpenter refreshes instance types and prices.
CELERY_BEAT_SCHEDULE = {
    "refresh-catalog": {"task": "provisioning.tasks.refresh_catalog", "schedule": 12 * 60 * 60.0},
    "resolve-nodeclasses": {"task": "provisioning.tasks.resolve_nodeclasses", "schedule": 60.0},
    "collect-garbage": {"task": "provisioning.tasks.collect_garbage", "schedule": 120.0},
    # Pending pods found again after a lost window (Redis restart) or a missed event.
    "sweep-pending": {"task": "provisioning.tasks.sweep_pending", "schedule": 5.0},
    "nodeclaim-lifecycle": {"task": "provisioning.tasks.nodeclaim_lifecycle", "schedule": 30.0},
    "disruption": {"task": "provisioning.tasks.disrupt", "schedule": 10.0},
    "spend-allocation": {"task": "provisioning.tasks.record_allocation", "schedule": KARPWEB_SPEND_SAMPLE_SECONDS},
}
if KARPWEB_INSTANCE_STATUS:
    CELERY_BEAT_SCHEDULE["instance-status"] = {"task": "provisioning.tasks.instance_status", "schedule": 60.0}
if KARPWEB_NODE_REPAIR:
    CELERY_BEAT_SCHEDULE["node-repair"] = {"task": "provisioning.tasks.repair_nodes", "schedule": 30.0}
if KARPWEB_CLUSTER == "simulated":
    # The simulated kubelet and scheduler.
    CELERY_BEAT_SCHEDULE["sim-tick"] = {"task": "provisioning.tasks.sim_tick", "schedule": 1.0}
if KARPWEB_DEMO_WORKLOAD:
    CELERY_BEAT_SCHEDULE["demo-workload"] = {"task": "provisioning.tasks.demo_workload", "schedule": 20.0}
