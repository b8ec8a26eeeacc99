package agentapi

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// An Event records no author the API server vouches for, and the default
// edit role may create Events in its namespace: without more, anyone who
// may do that could copy every field of a real agent Event onto an Event
// about another pod, or change its count, and `restart-injector status`
// would show it. So each agent signs its Events with a key of its own,
// made at its start and never written anywhere, and publishes the public
// half in a ConfigMap of the agent's namespace, where only the agents (and
// the cluster's admins) may write. status takes an Event only with a
// signature one of its node's published keys verifies.
//
// A node's ConfigMap keeps its MaxAgentKeys newest keys, so that the
// Events of an agent's earlier runs (Events live an hour by default:
// kube-apiserver --event-ttl) still verify after a restart or a rollout.

// MaxAgentKeys bounds the keys a node's ConfigMap keeps, and the keys
// status reads per node.
const MaxAgentKeys = 8

// SignedPayload is what the signature covers: every field of the Event
// that status reads or trusts. The annotations are the agent's
// (restart-supervisor.dev/...) but the signature; JSON sorts them.
func SignedPayload(reason string, ref corev1.ObjectReference, host string, ann map[string]string) []byte {
	own := map[string]string{}
	for k, v := range ann {
		if strings.HasPrefix(k, "restart-supervisor.dev/") && k != contract.EventAnnotationSignature {
			own[k] = v
		}
	}
	b, _ := json.Marshal(struct {
		Version     int               `json:"v"`
		Reason      string            `json:"reason"`
		Kind        string            `json:"kind"`
		Namespace   string            `json:"namespace"`
		Name        string            `json:"name"`
		UID         string            `json:"uid"`
		FieldPath   string            `json:"fieldPath"`
		Host        string            `json:"host"`
		Annotations map[string]string `json:"annotations"`
	}{1, reason, ref.Kind, ref.Namespace, ref.Name, string(ref.UID), ref.FieldPath, host, own})
	return b
}

// Signer signs the Events of one agent run.
type Signer struct {
	key  ed25519.PrivateKey
	host string
}

// NewSigner makes a key for host's agent. crypto/rand's Reader never
// fails (Go 1.24 and later: it crashes the program instead), so neither
// can GenerateKey.
func NewSigner(host string) *Signer {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	return &Signer{key: key, host: host}
}

// public is the base64 of the public key, as the ConfigMap holds it.
func (s *Signer) Public() string {
	return base64.StdEncoding.EncodeToString(s.key.Public().(ed25519.PublicKey))
}

// sign returns ann with the time (contract.EventAnnotationTime) and the
// signature of an Event of reason on ref.
func (s *Signer) Sign(reason string, ref *corev1.ObjectReference, ann map[string]string) map[string]string {
	out := make(map[string]string, len(ann)+2)
	for k, v := range ann {
		out[k] = v
	}
	if out[contract.EventAnnotationTime] == "" {
		out[contract.EventAnnotationTime] = time.Now().UTC().Format(time.RFC3339Nano)
	}
	sig := ed25519.Sign(s.key, SignedPayload(reason, *ref, s.host, out))
	out[contract.EventAnnotationSignature] = base64.StdEncoding.EncodeToString(sig)
	return out
}

// MaxSignedAnnotations bounds what an Event's signature check hashes: the
// agent writes at most three restart-supervisor.dev/ annotations besides
// the signature (a group restart's: group, generation, time), each under MaxAnnotation; an Event with more, or larger,
// is not the agent's and is refused before any hashing (the API server
// lets an Event carry 256 KiB of annotations).
const MaxSignedAnnotations = 4

// SignedByOneOf reports whether e carries a signature that one of keys
// verifies.
func SignedByOneOf(e corev1.Event, keys []ed25519.PublicKey) bool {
	v := e.Annotations[contract.EventAnnotationSignature]
	if len(keys) == 0 || len(v) != base64.StdEncoding.EncodedLen(ed25519.SignatureSize) {
		return false
	}
	own := 0
	for k, a := range e.Annotations {
		if strings.HasPrefix(k, "restart-supervisor.dev/") {
			if own++; own > MaxSignedAnnotations+1 || len(a) > MaxAnnotation {
				return false
			}
		}
	}
	sig, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return false
	}
	payload := SignedPayload(e.Reason, e.InvolvedObject, e.Source.Host, e.Annotations)
	for _, k := range keys {
		if ed25519.Verify(k, payload, sig) {
			return true
		}
	}
	return false
}

// AgentKeyConfigMap is the name of the ConfigMap that publishes node's
// keys: a hash, since a node's name may be as long as a ConfigMap's.
func AgentKeyConfigMap(node string) string {
	h := sha256.Sum256([]byte(node))
	return contract.AgentKeyLabel + "-" + hex.EncodeToString(h[:8])
}

// PublishKey puts pub first in node's ConfigMap in namespace, keeping the
// newest MaxAgentKeys keys; agents of other nodes write their own
// ConfigMaps, and a conflict (this node's agent of a rollout's other
// side) is read again.
func PublishKey(ctx context.Context, client kubernetes.Interface, namespace, node, pub string) error {
	cms := client.CoreV1().ConfigMaps(namespace)
	name := AgentKeyConfigMap(node)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
				Labels: map[string]string{"app.kubernetes.io/name": contract.AgentKeyLabel}},
				Data: map[string]string{"node": node, "keys": pub}}
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		keys := []string{pub}
		for _, k := range strings.Split(cm.Data["keys"], "\n") {
			if k != "" && k != pub && len(keys) < MaxAgentKeys {
				keys = append(keys, k)
			}
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data["node"], cm.Data["keys"] = node, strings.Join(keys, "\n")
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}

// AgentKeys reads every node's published keys from namespace. A ConfigMap
// whose name is not its node's hash is not taken, so that no ConfigMap can
// speak for a node another one already does; a key that is not 32 bytes
// of base64 is skipped.
func AgentKeys(ctx context.Context, client kubernetes.Interface, namespace string) (map[string][]ed25519.PublicKey, error) {
	keys := map[string][]ed25519.PublicKey{}
	opts := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + contract.AgentKeyLabel, Limit: 500}
	for {
		l, err := client.CoreV1().ConfigMaps(namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list the node agents' keys in namespace %s (Events are trusted only with a signature they verify): %w", namespace, err)
		}
		for _, cm := range l.Items {
			node := cm.Data["node"]
			if node == "" || cm.Name != AgentKeyConfigMap(node) {
				continue
			}
			keys[node] = ParseKeys(cm.Data["keys"])
		}
		if l.Continue == "" {
			return keys, nil
		}
		opts.Continue = l.Continue
	}
}

// AgentKeyPublished reports whether node's agent published a key that
// status can verify its Events with, for restart-injector check.
func AgentKeyPublished(ctx context.Context, client kubernetes.Interface, namespace, node string) (bool, error) {
	cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, AgentKeyConfigMap(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the node agent's key of node %s in namespace %s: %w", node, namespace, err)
	}
	if cm.Data["node"] != node {
		return false, nil
	}
	return len(ParseKeys(cm.Data["keys"])) > 0, nil
}

// ParseKeys reads the first MaxAgentKeys lines of a ConfigMap's keys,
// each the base64 of an Ed25519 public key; other lines are skipped.
func ParseKeys(data string) []ed25519.PublicKey {
	var keys []ed25519.PublicKey
	for i, k := range strings.SplitN(data, "\n", MaxAgentKeys+1) {
		if i == MaxAgentKeys {
			break
		}
		if b, err := base64.StdEncoding.DecodeString(k); err == nil && len(b) == ed25519.PublicKeySize &&
			!slices.ContainsFunc(keys, func(p ed25519.PublicKey) bool { return p.Equal(ed25519.PublicKey(b)) }) {
			keys = append(keys, ed25519.PublicKey(b))
		}
	}
	return keys
}
