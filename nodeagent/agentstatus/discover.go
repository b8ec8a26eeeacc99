package agentstatus

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// What the CLI finds of an install, whatever its Helm release name and
// namespace: both are found from cluster-scoped objects only a cluster
// administrator can make, never from what a namespace's tenant could
// label alike (the agent's namespace is where the CLI trusts Events and
// reads the agents' signing keys from).

// PodWebhookName is the name of the webhook entry that injects pods, the
// same in every install.
const PodWebhookName = "inject.restart-supervisor.dev"

// FindWebhookConfigs returns the MutatingWebhookConfigurations that hold
// the pod webhook (PodWebhookName), by name.
func FindWebhookConfigs(ctx context.Context, client kubernetes.Interface) ([]admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var out []admissionregistrationv1.MutatingWebhookConfiguration
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list MutatingWebhookConfigurations: %w", err)
		}
		for _, c := range l.Items {
			if slices.ContainsFunc(c.Webhooks, func(w admissionregistrationv1.MutatingWebhook) bool { return w.Name == PodWebhookName }) {
				out = append(out, c)
			}
		}
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// FindAgentNamespaces returns the namespaces of the node agents' service
// accounts, from the ClusterRoleBindings of the agent: labelled
// agentapi.AgentLabel (the chart, deploy/), or named
// agentapi.AgentNamespace (deploy/ before it had the label).
func FindAgentNamespaces(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	seen := map[string]bool{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := client.RbacV1().ClusterRoleBindings().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list ClusterRoleBindings: %w", err)
		}
		for _, b := range l.Items {
			name, value, _ := strings.Cut(agentapi.AgentLabel, "=")
			if b.Labels[name] != value && b.Name != agentapi.AgentNamespace {
				continue
			}
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" && s.Namespace != "" {
					seen[s.Namespace] = true
				}
			}
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out, nil
}

// AgentNamespaceFor returns the namespace to take the agents from: the
// one found (FindAgentNamespaces), the first of several, else
// agentapi.AgentNamespace; a note that says which and why, and how many
// installs were found (-1: the list was refused).
func AgentNamespaceFor(ctx context.Context, client kubernetes.Interface) (ns, note string, found int) {
	all, err := FindAgentNamespaces(ctx, client)
	switch {
	case err != nil:
		return agentapi.AgentNamespace, fmt.Sprintf("namespace %s (not looked up: %v; --agent-namespace names another)", agentapi.AgentNamespace, err), -1
	case len(all) == 1:
		return all[0], fmt.Sprintf("namespace %s (found by its ClusterRoleBinding)", all[0]), 1
	case len(all) > 1:
		return all[0], fmt.Sprintf("namespace %s, the first of %s (found by their ClusterRoleBindings; --agent-namespace names another)", all[0], strings.Join(all, ", ")), len(all)
	}
	return agentapi.AgentNamespace, fmt.Sprintf("no install found by its ClusterRoleBinding; namespace %s", agentapi.AgentNamespace), 0
}
