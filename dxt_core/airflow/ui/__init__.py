"""The archive coverage view served inside Airflow's API server (see ``plugin.py``).

``grid`` joins the archive's manifest index with Airflow's task instances, ``app`` is the
FastAPI app (every endpoint behind the auth manager's token), ``static/`` the page.
"""
