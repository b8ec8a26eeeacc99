package nodeagent

import (
	"context"
	"time"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// publishUntilDone publishes the key, again every so often until it is
// published or ctx ends: until then, status takes none of this run's
// Events, which are written all the same.
func (a *Agent) publishUntilDone(ctx context.Context) {
	delay := time.Second
	for {
		err := agentapi.PublishKey(ctx, a.cfg.Client, a.cfg.KeyNamespace, a.cfg.NodeName, a.signer.Public())
		if err == nil {
			a.log.Info("Event-signing key published", "namespace", a.cfg.KeyNamespace, "configMap", agentapi.AgentKeyConfigMap(a.cfg.NodeName))
			return
		}
		if ctx.Err() != nil {
			return // stopping: not a failure to report
		}
		a.log.Error("publish the Event-signing key: status shows none of this agent's Events until it is published (the agent needs get, create and update on configmaps in its namespace)",
			"namespace", a.cfg.KeyNamespace, "err", err, "retryIn", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Minute)
	}
}
