"""The pure core: requirements, resources, instance types and offerings, the solver.

Nothing in this package imports Django, boto3, kubernetes or redis (a test checks); it
takes and returns plain dataclasses, and the clock is passed in.
"""
