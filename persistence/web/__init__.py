"""What the two web apps, the operator UI (`persistence.ui`) and the webhook ingress
(`persistence.ingress`), share, so that they check a token alike and answer the same JSON for
the same run: `access` (the token, its OpenAPI note, the loopback rule), `runs` (a run's
details assembled from the store), `responses` (the response models of a run) and `inbound`
(the event types refused from outside, a client gone mid-body). It imports neither app.
"""
