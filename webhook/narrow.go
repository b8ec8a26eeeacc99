package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// The webhook steps aside (--narrow-self, with --native=auto): once every
// node honours both features natively, the pods webhook's own
// matchConditions are narrowed to the pods that still need it, those that
// carry the rules annotation (which only this project reads: the
// RestartGroup action, the limits, a release without the fields), so the
// API server stops calling the webhook for every other pod with rules; when
// a node that lacks a feature joins again, the conditions are widened back
// to what was installed. The installed expression is kept in an annotation
// of the configuration, so widening restores it whatever it was.
const (
	// PodsWebhookName is the webhook of deploy/base/webhook.yaml that
	// receives pods.
	PodsWebhookName = "inject.restart-supervisor.dev"
	// RulesCondition is its matchCondition that selects pods with rules.
	RulesCondition = "carries-restart-rules"
	// NarrowRulesExpression is RulesCondition narrowed: only the
	// annotation carrier.
	NarrowRulesExpression = "has(object.metadata.annotations) &&\n  '" + contract.AnnotationRules + "' in object.metadata.annotations"
	// AnnotationWideCondition on the configuration keeps RulesCondition's
	// installed expression while it is narrowed.
	AnnotationWideCondition = "restart-supervisor.dev/wide-match-condition"
)

// SelfNarrower narrows and widens the webhook's own configuration.
type SelfNarrower struct {
	Client kubernetes.Interface
	// WebhookConfig is the MutatingWebhookConfiguration (the webhook needs
	// get and patch on it by name, and nothing else).
	WebhookConfig string
	Log           *slog.Logger
}

// Apply narrows the configuration (narrow) or widens it back, and reports
// whether it changed it. A configuration without the pods webhook or its
// condition is left alone with an error naming what is missing, so a
// hand-edited install is never rewritten blind.
func (s *SelfNarrower) Apply(ctx context.Context, narrow bool, why string) (bool, error) {
	mwcs := s.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	for attempt := 0; ; attempt++ {
		mwc, err := mwcs.Get(ctx, s.WebhookConfig, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get MutatingWebhookConfiguration %s: %w", s.WebhookConfig, err)
		}
		ops, err := narrowOps(mwc, narrow)
		if err != nil || len(ops) == 0 {
			return false, err
		}
		ops = append([]map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": mwc.ResourceVersion}}, ops...)
		body, _ := json.Marshal(ops)
		_, err = mwcs.Patch(ctx, s.WebhookConfig, types.JSONPatchType, body, metav1.PatchOptions{FieldManager: "restart-injector"})
		if err == nil {
			s.record(ctx, narrow, why)
			return true, nil
		}
		// Another replica, or an apply, wrote in between: look again.
		if attempt < 5 && (apierrors.IsConflict(err) || apierrors.IsInvalid(err)) {
			continue
		}
		return false, fmt.Errorf("patch matchConditions of MutatingWebhookConfiguration %s: %w", s.WebhookConfig, err)
	}
}

// narrowOps are the JSON patch operations that make mwc narrow or wide; none
// when it is so already.
func narrowOps(mwc *admissionregistrationv1.MutatingWebhookConfiguration, narrow bool) ([]map[string]any, error) {
	wi, ci := -1, -1
	for i, wh := range mwc.Webhooks {
		if wh.Name != PodsWebhookName {
			continue
		}
		wi = i
		for j, c := range wh.MatchConditions {
			if c.Name == RulesCondition {
				ci = j
			}
		}
	}
	if wi < 0 || ci < 0 {
		return nil, fmt.Errorf("MutatingWebhookConfiguration %s has no webhook %s with matchCondition %s: left as it is", mwc.Name, PodsWebhookName, RulesCondition)
	}
	expr := mwc.Webhooks[wi].MatchConditions[ci].Expression
	path := fmt.Sprintf("/webhooks/%d/matchConditions/%d/expression", wi, ci)
	wide, saved := mwc.Annotations[AnnotationWideCondition]
	annPath := "/metadata/annotations/" + jsonPointerEscape(AnnotationWideCondition)
	switch {
	case narrow && expr == NarrowRulesExpression:
		return nil, nil
	case narrow:
		ops := []map[string]any{}
		if mwc.Annotations == nil {
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{}})
		}
		return append(ops,
			map[string]any{"op": "add", "path": annPath, "value": expr},
			map[string]any{"op": "replace", "path": path, "value": NarrowRulesExpression}), nil
	case expr != NarrowRulesExpression:
		// Wide already (an apply put the installed expression back):
		// drop a saved copy that no longer stands for anything.
		if saved {
			return []map[string]any{{"op": "remove", "path": annPath}}, nil
		}
		return nil, nil
	case !saved || wide == "":
		return nil, fmt.Errorf("MutatingWebhookConfiguration %s is narrowed but has no %s annotation to widen it from: apply the installed configuration again", mwc.Name, AnnotationWideCondition)
	}
	return []map[string]any{
		{"op": "replace", "path": path, "value": wide},
		{"op": "remove", "path": annPath},
	}, nil
}

// NarrowOnConclusion is a NativeDetector's OnConclusion: narrow when every
// node honours both features, widen otherwise. A failure is logged and
// tried again at the next check.
func (s *SelfNarrower) NarrowOnConclusion(ctx context.Context, rulesOK, allOK bool, why string) {
	if _, err := s.Apply(ctx, rulesOK && allOK, why); err != nil {
		s.log().Warn("webhook configuration not narrowed or widened", "err", err)
	}
}

// jsonPointerEscape escapes a key for a JSON Pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '~':
			out = append(out, '~', '0')
		case '/':
			out = append(out, '~', '1')
		default:
			out = append(out, s[i])
		}
	}
	return string(out)
}

// record logs a change and leaves an Event on the configuration, in the
// namespace default: the API server takes an Event about a cluster-scoped
// object only there (or in kube-system; pkg/apis/core/validation/events.go,
// v1.37.2), as the kubelet's about its Node. An Event that cannot be
// written is logged, the change stands.
func (s *SelfNarrower) record(ctx context.Context, narrow bool, why string) {
	reason, msg := "WebhookWidened", "matchCondition "+RulesCondition+" widened back to the installed expression: "+why
	if narrow {
		reason, msg = "WebhookNarrowed", "matchCondition "+RulesCondition+" narrowed to pods with the "+contract.AnnotationRules+" annotation: "+why
	}
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	s.log().Info("webhook configuration "+map[bool]string{true: "narrowed", false: "widened"}[narrow], "configuration", s.WebhookConfig, "reason", why)
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: s.WebhookConfig + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration",
			Name: s.WebhookConfig},
		Reason: reason, Message: msg, Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "restart-injector"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := s.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		s.log().Warn("webhook configuration change: Event not recorded", "err", err)
	}
}

func (s *SelfNarrower) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}
