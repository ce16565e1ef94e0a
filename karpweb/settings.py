"""karpweb settings: every knob comes from the environment, with defaults that work
straight after a checkout (SQLite under var/, the embedded Redis that ``make run``
starts, the simulated cluster and the simulated AWS).
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from karpweb.env import env_bool, env_float, env_int, env_list, env_str
from karpweb.redisconf import sentinels
from karpweb.secret import local_secret_key, production_secret

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("KARPWEB_VAR_DIR", str(BASE_DIR / "var")))

# Production (the image's ConfigMap sets it): secrets must be given and real, cookies and
# redirects assume a TLS ingress in front, /metrics wants its token. A checkout (`make run`,
# the tests) runs without it on embedded defaults.
KARPWEB_PRODUCTION = env_bool("KARPWEB_PRODUCTION", False)
DEBUG = env_bool("DEBUG", False)
if KARPWEB_PRODUCTION and DEBUG:
    raise ImproperlyConfigured(
        "DEBUG=true with KARPWEB_PRODUCTION=true: debug pages show settings and source to whoever "
        "reaches them; unset DEBUG"
    )
SECRET_KEY = env_str("SECRET_KEY")
if KARPWEB_PRODUCTION:
    SECRET_KEY = production_secret("SECRET_KEY", SECRET_KEY, minimum=50)
elif not SECRET_KEY:
    # A key made once per checkout keeps sessions valid across restarts without a secret in git.
    SECRET_KEY = local_secret_key(VAR_DIR)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
# The pod's own address (the downward API's status.podIP): Prometheus scrapes a pod by it, and
# the Host check (which /metrics passes like every other URL) must allow it.
if env_str("POD_IP").strip():
    ALLOWED_HOSTS.append(env_str("POD_IP").strip())
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "axes",
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

# Which process this is: "web" (the dashboard, the REST API, the admin site) or "webhook" (the
# admission webhook alone, for the API server). Each serves its own URLconf through its own
# middleware, so neither answers the other's URLs. deploy/gunicorn.conf.py reads it too.
KARPWEB_ROLE = env_str("KARPWEB_ROLE", "web").strip().lower() or "web"
if KARPWEB_ROLE not in ("web", "webhook"):
    raise ImproperlyConfigured(f"KARPWEB_ROLE={KARPWEB_ROLE!r}: expected web or webhook")

WEB_MIDDLEWARE = [
    "karpweb.logs.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The Host check (request.get_host()) for every URL, /metrics included.
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it answers a locked-out sign-in.
    "axes.middleware.AxesMiddleware",
]
# The API server is the webhook's only caller: no sessions, users, messages or pages, so only
# what every response needs. CSRF (the webhook view is exempt) and frame options cost
# microseconds and keep this role's `check --deploy` as clean as the web's.
WEBHOOK_MIDDLEWARE = [
    "karpweb.logs.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
URLCONFS = {"web": "karpweb.urls", "webhook": "karpweb.urls_webhook"}
if KARPWEB_ROLE == "webhook":
    # No admin site and no sign-in on the webhook's port: their apps would want the session,
    # user, message and login-throttle middleware that this role leaves out.
    INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in ("django.contrib.admin", "axes")]
MIDDLEWARE = WEBHOOK_MIDDLEWARE if KARPWEB_ROLE == "webhook" else WEB_MIDDLEWARE
ROOT_URLCONF = URLCONFS[KARPWEB_ROLE]
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
# Sign-in throttling (django-axes, its attempts in the database): after
# KARPWEB_LOGIN_FAILURE_LIMIT failed sign-ins for one user name, or from one address, the next
# ones for it are refused (429, provisioning/ui/lockout.py) until
# KARPWEB_LOGIN_COOLOFF_MINUTES have passed or an admin deletes the attempts in the admin site.
# The admin site's sign-in goes through the same backend.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("KARPWEB_LOGIN_FAILURE_LIMIT", 10)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("KARPWEB_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "provisioning.ui.lockout.locked_out"
AXES_CLIENT_IP_CALLABLE = "karpweb.clientip.client_ip"
# Proxies in front of the web pods that append the address they saw to X-Forwarded-For (the
# ingress controller: 1): the client's address is that many entries from the right. 0 trusts no
# header and takes the connection's address (behind a proxy: the proxy's, shared by everyone).
KARPWEB_TRUSTED_PROXIES = env_int("KARPWEB_TRUSTED_PROXIES", 1 if KARPWEB_PRODUCTION else 0)
if AXES_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured(f"KARPWEB_LOGIN_FAILURE_LIMIT={AXES_FAILURE_LIMIT}: expected 1 or more")
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
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", KARPWEB_PRODUCTION)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# Behind a TLS ingress: the ingress tells the scheme it was reached by in this header (it must
# set it, overwriting a client's), so Django knows a request was HTTPS. Empty: trust no header.
_proxy_ssl_header = env_str("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto" if KARPWEB_PRODUCTION else "").strip()
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https") if _proxy_ssl_header else None
)
# Plain HTTP is redirected to HTTPS, except what the kubelet and Prometheus ask for inside the
# cluster, over the pod's plain port.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", KARPWEB_PRODUCTION)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
# HSTS: browsers use HTTPS only for this host (and its subdomains) for a year.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600 if KARPWEB_PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", KARPWEB_PRODUCTION)
# Preloading is the domain owner's decision (anyone may submit a domain whose header says
# "preload" to the browsers' list, which is slow to leave), so it is off unless asked for, and
# `check --deploy` is not to warn about it.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]

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
    "DEFAULT_THROTTLE_CLASSES": ["provisioning.rest.throttling.PerToken"],
    "DEFAULT_THROTTLE_RATES": {"token": env_str("KARPWEB_API_RATE", "1200/minute")},
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
    # The schema and Swagger UI describe what a viewer may read: a viewer's token or session.
    "SERVE_PERMISSIONS": ["provisioning.rest.permissions.ByRole"],
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
# Karpweb's repacking (after upstream's methods): a few nodes packed anew onto fewer, cheaper ones.
# Off: upstream's methods alone.
KARPWEB_REPACKING = env_bool("KARPWEB_REPACKING", True)
# How long a disruption round's consolidation simulations may take before single-node
# consolidation stops and goes on next round (upstream times its methods out too).
KARPWEB_CONSOLIDATION_SECONDS = env_float("KARPWEB_CONSOLIDATION_SECONDS", 3.0)
# What a whole disruption round aims to take: its consolidation gets what is left of this once
# the commands in progress were carried on and the cluster read, less half a second for the
# drains (at least half a second, at most KARPWEB_CONSOLIDATION_SECONDS); the drains come last
# with what is left then (at least half a second); the nodes they did not reach go next round.
KARPWEB_DISRUPTION_ROUND_SECONDS = env_float("KARPWEB_DISRUPTION_ROUND_SECONDS", 4.0)
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
    # django-axes' routine lines (its start, each successful sign-in) are info; failed sign-ins
    # and lockouts are warnings, and still come.
    "loggers": {"axes": {"level": "WARNING"}},
}

# Metrics (provisioning/observability): the web role's /metrics answers Prometheus; with a token
# set it wants `Authorization: Bearer <token>`, and in production it answers nobody until one is
# set. Of the web replicas, the one holding a lease in Redis adds the cluster's state from the
# database, so a sum over replicas counts each pod and node once. The webhook and worker pods
# serve theirs on KARPWEB_METRICS_PORT, outside Django (provisioning/observability/port.py).
KARPWEB_METRICS_TOKEN = env_str("KARPWEB_METRICS_TOKEN")
if KARPWEB_PRODUCTION and KARPWEB_METRICS_TOKEN:
    KARPWEB_METRICS_TOKEN = production_secret("KARPWEB_METRICS_TOKEN", KARPWEB_METRICS_TOKEN, minimum=32)
KARPWEB_METRICS_LEASE_SECONDS = env_float("KARPWEB_METRICS_LEASE_SECONDS", 90.0)
# karpenter_pods_state has a series per pod: at most this many, pending pods first.
KARPWEB_METRICS_MAX_POD_SERIES = env_int("KARPWEB_METRICS_MAX_POD_SERIES", 5000)

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
    "capacity-reservations": {"task": "provisioning.tasks.capacity_reservations", "schedule": 60.0},
    "refresh-nodeoverlays": {"task": "provisioning.tasks.refresh_nodeoverlays", "schedule": 60.0},
    "collect-garbage": {"task": "provisioning.tasks.collect_garbage", "schedule": 120.0},
    # Pending pods found again after a lost window (Redis restart) or a missed event.
    "sweep-pending": {"task": "provisioning.tasks.sweep_pending", "schedule": 5.0},
    "nodeclaim-lifecycle": {"task": "provisioning.tasks.nodeclaim_lifecycle", "schedule": 30.0},
    "disruption": {"task": "provisioning.tasks.disrupt", "schedule": 10.0},
    # Static NodePools (spec.replicas) kept at their replicas.
    "static-capacity": {"task": "provisioning.tasks.static_capacity", "schedule": 10.0},
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
