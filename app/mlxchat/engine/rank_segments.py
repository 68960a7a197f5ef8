WORKER_JOBS: dict = {}
