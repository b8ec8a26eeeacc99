package agentapi

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// TestPublishedKeys: each agent run puts its key first in its node's
// ConfigMap, which keeps the newest MaxAgentKeys; the reader takes a
// node's keys only from the ConfigMap named for that node, and no key
// that is not 32 bytes of base64.
func TestPublishedKeys(t *testing.T) {
	ctx := context.Background()
	client := kubefake.NewClientset()
	if ok, err := AgentKeyPublished(ctx, client, AgentNamespace, "node-a"); ok || err != nil {
		t.Fatalf("before any run: published %v, %v", ok, err)
	}
	var runs []*Signer
	for i := 0; i < MaxAgentKeys+2; i++ {
		s := NewSigner("node-a")
		runs = append(runs, s)
		if err := PublishKey(ctx, client, AgentNamespace, "node-a", s.Public()); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := AgentKeyPublished(ctx, client, AgentNamespace, "node-a"); !ok || err != nil {
		t.Fatalf("after the runs: published %v, %v", ok, err)
	}
	// A ConfigMap that claims node-a under another name, and one with
	// keys of the wrong size, speak for nobody.
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "impostor", Namespace: AgentNamespace, Labels: map[string]string{"app.kubernetes.io/name": contract.AgentKeyLabel}},
			Data: map[string]string{"node": "node-a", "keys": NewSigner("node-a").Public()}},
		{ObjectMeta: metav1.ObjectMeta{Name: AgentKeyConfigMap("node-b"), Namespace: AgentNamespace, Labels: map[string]string{"app.kubernetes.io/name": contract.AgentKeyLabel}},
			Data: map[string]string{"node": "node-b", "keys": "c2hvcnQ=\n" + strings.Repeat("A", 44)}},
	} {
		if _, err := client.CoreV1().ConfigMaps(AgentNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := AgentKeys(ctx, client, AgentNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys["node-a"]) != MaxAgentKeys {
		t.Fatalf("node-a: %d keys, want the newest %d", len(keys["node-a"]), MaxAgentKeys)
	}
	newest := ParseKeys(runs[len(runs)-1].Public())[0]
	if !keys["node-a"][0].Equal(newest) {
		t.Error("node-a's first key is not its newest run's")
	}
	oldest := ParseKeys(runs[0].Public())[0]
	for _, k := range keys["node-a"] {
		if k.Equal(oldest) {
			t.Error("the oldest run's key is kept past MaxAgentKeys")
		}
	}
	if len(keys["node-b"]) != 0 {
		t.Errorf("node-b: %d keys from a short and a 33-byte value, want none", len(keys["node-b"]))
	}
	if ok, _ := AgentKeyPublished(ctx, client, AgentNamespace, "node-b"); ok {
		t.Error("node-b counted as published with no valid key")
	}
}
