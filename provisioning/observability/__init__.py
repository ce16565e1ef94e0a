"""Metrics for Prometheus, named as Karpenter names them where they mean the same, so the
Grafana dashboards written for Karpenter work against karpweb.

karpweb runs as several processes in several pods: gunicorn web and webhook replicas (each a
master and a few worker processes) and Celery workers (each a main process and a pool of
forked processes). A counter lives in the memory of the process that increments it, so two
kinds of metric are kept apart:

* **What happens in a process** (a provisioning run's duration and size, a batch window, a
  cloud call, an admission review) is counted where it happens (``metrics.py``) and served by
  that pod: a Celery worker serves its own on ``KARPWEB_METRICS_PORT`` (``worker.py``), and so
  does the webhook role's gunicorn master for its workers (``port.py``, the same code); the web
  role's gunicorn serves its workers' on ``/metrics``. Several processes of one pod share their
  counters through files in ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess mode;
  the directory is per pod, never shared between pods), so a scrape of the pod sees all of them.
  Prometheus scrapes every pod and sums.

* **The state of the cluster** (pods by phase, nodes and what is requested of them,
  NodeClaims by state, NodePool usage and limits, offering prices, spend) is read from the
  database when Prometheus scrapes (``cluster.py``), which is right whatever the number of
  replicas, since the database is the truth; so is the length of the Celery queues, read from
  the broker's Redis (``broker.py``). One web replica adds them to its ``/metrics``: the
  one holding a lease in Redis (``views.py``), as only Karpenter's leader reports it. Otherwise
  every replica would report every pod and ``sum(karpenter_pods_state)`` would count each
  pod once per replica. Counters that happen in workers but belong with this state are
  counted from rows that are never deleted (NodeClaims created and terminated, nodes created,
  disruptions carried out, decisions), so they only ever grow, as counters must.
"""
