"""The operator's Kubernetes plumbing, apart from what it reconciles: the API client
(:mod:`.cluster`: paced, retried, fenced writes), the object cache (:mod:`.object_cache`),
the work queue (:mod:`.work_queue`), leader election (:mod:`.leader_election`) and where kopf
keeps the last spec it handled (:mod:`.diff_base`)."""
