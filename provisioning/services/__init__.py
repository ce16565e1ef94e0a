"""Workflows: everything that touches several models, the cluster or the cloud.

Views, viewsets, the webhook, commands and tasks parse their input, call one function
from here, and render the result.
"""
