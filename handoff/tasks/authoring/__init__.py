"""The task sets' build side (`handoff labels build|check|golds|review|override`): derivation, audits,
gold checks, behaviour baselines, the generated manifests. Never imported by the read side
(handoff.tasks), which sweep workers load."""
