package nodeagent

import (
	"encoding/json"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// combinedPrefix is what client-go's correlator puts before the message of
// an Event it aggregates (record.EventAggregatorByReasonMessageFunc).
const combinedPrefix = "(combined from similar events): "

// eventSink writes the recorder's Events with what client-go's correlator
// leaves out. Its aggregate Event (record/events_cache.go EventAggregate,
// client-go v0.37.2) is a new object with the combined message but without
// the annotations and the reportingController and reportingInstance of the
// Event it stands for, and a repeated Event is patched with its count,
// last timestamp and message only. So that every RestartedInPlace Event,
// aggregated or not, carries the structured values of its latest message,
// the sink sets the reporting fields on each create and the annotations
// that go with the message on each create and patch.
type eventSink struct {
	record.EventSink
	instance string

	mu          sync.Mutex
	annotations map[rememberKey]map[string]string
}

// rememberKey is a message on one object: two pods' Events can have the
// same message, but not the same signature.
type rememberKey struct {
	uid, fieldPath, message string
}

// maxRemembered bounds the messages the sink keeps annotations for: well
// over what the broadcaster's queue (1000 Events) holds at once.
const maxRemembered = 4096

func newEventSink(instance string) *eventSink {
	return &eventSink{instance: instance, annotations: map[rememberKey]map[string]string{}}
}

// remember records the annotations that go with msg on ref.
func (s *eventSink) remember(ref *corev1.ObjectReference, msg string, ann map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.annotations) >= maxRemembered {
		clear(s.annotations)
	}
	s.annotations[rememberKey{string(ref.UID), ref.FieldPath, msg}] = ann
}

func (s *eventSink) annotationsOf(e *corev1.Event) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.annotations[rememberKey{string(e.InvolvedObject.UID), e.InvolvedObject.FieldPath, strings.TrimPrefix(e.Message, combinedPrefix)}]
}

// Create implements record.EventSink.
func (s *eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	e = e.DeepCopy()
	if e.ReportingController == "" {
		e.ReportingController, e.ReportingInstance = agentapi.Component, s.instance
	}
	if ann := s.annotationsOf(e); ann != nil {
		if e.Annotations == nil {
			e.Annotations = map[string]string{}
		}
		for k, v := range ann {
			e.Annotations[k] = v
		}
	}
	return s.EventSink.Create(e)
}

// Patch implements record.EventSink: the correlator's patch, and the
// annotations of the new message.
func (s *eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if ann := s.annotationsOf(e); ann != nil {
		var p map[string]any
		if err := json.Unmarshal(data, &p); err == nil {
			meta, _ := p["metadata"].(map[string]any)
			if meta == nil {
				meta = map[string]any{}
			}
			meta["annotations"] = ann
			p["metadata"] = meta
			if b, err := json.Marshal(p); err == nil {
				data = b
			}
		}
	}
	return s.EventSink.Patch(e, data)
}
