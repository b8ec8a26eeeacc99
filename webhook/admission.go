package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	jsoniter "github.com/json-iterator/go"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// MaxRequestBytes caps an AdmissionReview body. The API server itself refuses
// request bodies over 3 MiB, and a review carries the object once (twice for
// updates, which this webhook never receives), so anything larger is not a
// review the API server sent.
const MaxRequestBytes = 3<<20 + 64<<10

// MaxPatchBytes caps the JSON patch of one review. etcd refuses an object
// over 1.5 MiB (its default --max-request-bytes), the API server a request
// body over 3 MiB; the patch is added to the pod and sent base64-encoded in
// the response, so 1 MiB leaves the pod room. The caps of the mutation
// (contract.MaxPodMembers, the lookup's argv caps) keep a patch far below
// it for any pod the API server accepts; this bound holds whatever the
// pod.
const MaxPatchBytes = 1 << 20

var errPatchTooLarge = errors.New("patch too large")

// encodePatch encodes ops as one JSON array, op by op, giving up once the
// array passes max bytes: each op is bounded by the review it came from,
// the whole by max.
func encodePatch(ops []injector.PatchOp, max int) ([]byte, error) {
	// One stream for all operations: a Marshal per operation allocated a
	// slice each (+20 % per injected review in BenchmarkReview).
	st := patchJSON.BorrowStream(nil)
	defer patchJSON.ReturnStream(st)
	st.WriteArrayStart()
	for i, op := range ops {
		if i > 0 {
			st.WriteMore()
		}
		st.WriteVal(op)
		if st.Error != nil {
			return nil, st.Error
		}
		if st.Buffered()+1 > max {
			return nil, fmt.Errorf("%w: %d of %d operations take %d bytes", errPatchTooLarge, i+1, len(ops), st.Buffered()+1)
		}
	}
	st.WriteArrayEnd()
	return append([]byte(nil), st.Buffer()...), nil
}

// patchJSON is fastJSON without HTML escapes: "<", ">" and "&" in a
// command stay one byte in the patch instead of six, and the API server
// reads either.
var patchJSON = jsoniter.Config{EscapeHTML: false, SortMapKeys: true, ValidateJsonRawMessage: true}.Froze()

// Mutator is what the webhook needs from the injector: the patch, not a
// mutated copy of the pod, with the inputs the webhook learns of its
// cluster at run time passed per call (injector.Injector.PodPatchWith).
type Mutator interface {
	PodPatchWith(ctx context.Context, pod *corev1.Pod, call injector.Call) (*injector.Result, error)
}

// EntrypointPolicy says what to do with a pod whose image entrypoint cannot be
// resolved.
type EntrypointPolicy string

const (
	// EntrypointDeny refuses the pod with a message naming container and image.
	EntrypointDeny EntrypointPolicy = "deny"
	// EntrypointAllow admits the pod without the supervisor and returns a
	// warning, which kubectl prints.
	EntrypointAllow EntrypointPolicy = "allow"
)

// NativeMode selects between injecting and relying on the cluster's own
// support for restartPolicyRules.
type NativeMode string

const (
	NativeOff  NativeMode = "off"  // always inject
	NativeAuto NativeMode = "auto" // inject unless the cluster honours the fields
	NativeOn   NativeMode = "on"   // never inject
)

// NativeState reports whether the cluster currently honours a feature of
// the native fields.
type NativeState interface {
	HonouredFor(NativeFeature) bool
}

// Handler answers admission/v1 AdmissionReviews for pod CREATE on /mutate.
type Handler struct {
	Mutator    Mutator
	Entrypoint EntrypointPolicy
	Native     NativeMode
	// NativeState is consulted in NativeAuto mode; nil means "not honoured".
	NativeState NativeState
	// Fields says whether the API server keeps restartPolicyRules; pod
	// templates are rewritten only when it does not (or is not known to).
	Fields  FieldState
	Metrics *Metrics
	Log     *slog.Logger

	// KubeVersion is the Kubernetes release whose API-server validation
	// the restart fields of a pod relying on the feature must pass
	// (NativeDetector.ValidationVersionFor); nil means the newest.
	KubeVersion func(NativeFeature) rules.KubeVersion
	// Delivery is how the pod now being injected gets the binaries
	// (ImageVolumeDetector.Delivery under --delivery=auto); nil leaves it
	// to the Mutator's options.
	Delivery func() injector.Delivery
}

var reviewTypeMeta = metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}

var podGVK = metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Pod"}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	result := ResultBadInput
	defer func() {
		if h.Metrics != nil {
			h.Metrics.Reviews.WithLabelValues(result).Inc()
			h.Metrics.Latency.Observe(time.Since(start).Seconds())
		}
	}()

	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, fmt.Sprintf("Content-Type %q: expected application/json", r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
		return
	}
	buf := borrowBody(r.ContentLength)
	defer returnBody(buf)
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	body := buf.Bytes()
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("request body exceeds %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	review, pod, err := decodeReview(body)
	if err != nil {
		http.Error(w, "decode AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	if msg := checkReview(review); msg != "" {
		http.Error(w, msg, http.StatusBadRequest)
		return
	}

	ctx := r.Context()
	// The API server tells us its deadline in ?timeout=; answer before it so
	// a slow registry yields our own clear message rather than its timeout.
	if t, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t*9/10)
		defer cancel()
	}

	resp, res := h.safeReview(ctx, review.Request, pod)
	result = res
	resp.UID = review.Request.UID
	// Encoded into a borrowed stream and written from its buffer: Marshal
	// would copy the whole response out once more.
	st := fastJSON.BorrowStream(nil)
	defer fastJSON.ReturnStream(st)
	st.WriteVal(admissionv1.AdmissionReview{TypeMeta: reviewTypeMeta, Response: resp})
	out, err := st.Buffer(), st.Error
	if err != nil {
		// Only a patch value that cannot be encoded gets here.
		h.log().Error("encode AdmissionReview response", "err", err)
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		result = ResultBadInput
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// checkReview returns why review is not one the API server sends, in one
// line, or "" when it is: the API server always sends apiVersion
// admission.k8s.io/v1, kind AdmissionReview and a request with a uid, which
// the response must echo.
func checkReview(review *admissionv1.AdmissionReview) string {
	switch {
	case review.APIVersion != reviewTypeMeta.APIVersion:
		return fmt.Sprintf("AdmissionReview apiVersion %.64q: only %s is served", review.APIVersion, reviewTypeMeta.APIVersion)
	case review.Kind != reviewTypeMeta.Kind:
		return fmt.Sprintf("kind %.64q: expected AdmissionReview", review.Kind)
	case review.Request == nil:
		return "AdmissionReview has no request"
	case review.Request.UID == "":
		return "AdmissionReview request.uid is empty: the response must echo it"
	}
	return ""
}

// podAdmissionReview is an AdmissionReview whose object is decoded as a Pod in the
// same pass: the object is most of the body, and decoding it twice (as raw
// bytes, then typed) was the largest cost of a review.
type podAdmissionReview struct {
	metav1.TypeMeta
	Request *podRequest `json:"request"`
}

type podRequest struct {
	admissionv1.AdmissionRequest
	// Shadows AdmissionRequest.Object (a shallower field wins in encoding/json).
	Object *corev1.Pod `json:"object"`
}

// fastJSON decodes and encodes with codecs built once per type instead of
// encoding/json's per-call reflection: three times faster on a pod, the
// largest cost of a review. It honours the same tags and (Un)Marshalers, and
// the API server's own serializer used it for years. Error messages come
// from encoding/json (the fallback below), which names fields more clearly.
var fastJSON = jsoniter.ConfigCompatibleWithStandardLibrary

// decodeReview decodes body, with the pod when the object is one. An object
// that does not decode as a Pod is left raw in the request, so the review
// can still be answered with a well-formed denial.
// bodyBuffers keeps the buffers reviews are read into: garbage collection
// is about half of the webhook's p99 at 1,000 reviews/s (docs/benchmarks.md),
// and a body read by io.ReadAll allocated about 7 KB per review. Nothing
// decoded keeps a reference into the buffer (strings and raw extensions are
// copied), so it is returned once the response is written.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody: a buffer grown larger than this (a review near
// MaxRequestBytes) is left to the collector rather than kept for every
// later review.
const maxPooledBody = 256 << 10

func borrowBody(contentLength int64) *bytes.Buffer {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	if contentLength > 0 {
		// Announced by the client: at most maxPooledBody is taken on its
		// word, the rest only as it arrives.
		buf.Grow(int(min(contentLength, maxPooledBody)) + bytes.MinRead)
	}
	return buf
}

func returnBody(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBody {
		bodyBuffers.Put(buf)
	}
}

func decodeReview(body []byte) (*admissionv1.AdmissionReview, *corev1.Pod, error) {
	// jsoniter accepts some bodies encoding/json refuses (a raw control
	// character inside a string): no API server sends one, and the
	// review's uid would be read from text that is not JSON. One scan,
	// without allocating; encoding/json's error says what is wrong.
	if !json.Valid(body) {
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil {
			return nil, nil, err
		}
		return nil, nil, errors.New("not valid JSON")
	}
	var fast podAdmissionReview
	if err := fastJSON.Unmarshal(body, &fast); err == nil && fast.Request != nil && fast.Request.Kind == podGVK {
		return &admissionv1.AdmissionReview{TypeMeta: fast.TypeMeta, Request: &fast.Request.AdmissionRequest}, fast.Request.Object, nil
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, nil, err
	}
	return &review, nil, nil
}

func (h *Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

// The responses a review ends in, built here alone.

// deny refuses the object with an HTTP-style code and reason.
func deny(code int32, reason metav1.StatusReason, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		Allowed: false,
		Result:  &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg},
	}
}

// allow admits the object untouched, with warnings for the client.
func allow(warnings ...string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

// allowPatched admits the object with patch, an encoded JSON patch.
func allowPatched(patch []byte, warnings []string) *admissionv1.AdmissionResponse {
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt, Warnings: warnings}
}

// safeReview is review with a panic (a bug) turned into a denial that names
// it, so the API server gets an answer and the log gets the stack, instead
// of a dropped connection.
func (h *Handler) safeReview(ctx context.Context, req *admissionv1.AdmissionRequest, pod *corev1.Pod) (resp *admissionv1.AdmissionResponse, result string) {
	defer func() {
		if p := recover(); p != nil {
			h.log().Error("panic while reviewing", "uid", req.UID, "namespace", req.Namespace, "panic", p, "stack", string(debug.Stack()))
			resp, result = deny(http.StatusInternalServerError, metav1.StatusReasonInternalError,
				fmt.Sprintf("restart-injector internal error (please report): %v", p)), ResultDenied
		}
	}()
	return h.review(ctx, req, pod)
}

// review decides one request. It never returns nil.
func (h *Handler) review(ctx context.Context, req *admissionv1.AdmissionRequest, pod *corev1.Pod) (*admissionv1.AdmissionResponse, string) {
	log := h.log().With("uid", req.UID, "namespace", req.Namespace, "name", req.Name)
	if isWorkload(req.Kind) && req.SubResource == "" {
		resp, result := h.reviewTemplate(req)
		if result == ResultInjected {
			log.Info("rules copied into the pod template annotation", "kind", req.Kind.Kind)
		}
		return resp, result
	}
	if req.Kind != podGVK || req.Resource.Resource != "pods" || req.SubResource != "" {
		msg := fmt.Sprintf("restart-injector only reviews core/v1 pods and workload templates, got %s %s/%s resource %q subresource %q",
			req.Kind.Kind, req.Kind.Group, req.Kind.Version, req.Resource.Resource, req.SubResource)
		log.Warn("unexpected admission request; check the webhook configuration's rules", "detail", msg)
		return deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, msg), ResultBadInput
	}
	if req.Operation != admissionv1.Create {
		// A pod's spec is immutable after creation: nothing to inject.
		return allow(), ResultUntouched
	}
	if pod == nil {
		pod = new(corev1.Pod)
		if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
			return deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, "decode Pod: "+err.Error()), ResultBadInput
		}
	}
	// The API server fills an object's namespace from the request and
	// refuses a mismatch before admission: a differing one is not its
	// review. Pull secrets are read in req.Namespace alone.
	if pod.Namespace != "" && pod.Namespace != req.Namespace {
		msg := fmt.Sprintf("metadata.namespace %.64q differs from request.namespace %.64q", pod.Namespace, req.Namespace)
		return deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, msg), ResultBadInput
	}
	pod.Namespace = req.Namespace
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		// A static pod's mirror: the kubelet runs the manifest on its
		// disk, not this object, so a patch here would wrap nothing and
		// make the API show containers that do not run.
		return allow("mirror pod of a static pod: restart rules are not injected here; run `restart-injector inject` on the static pod's manifest on the node"), ResultUntouched
	}
	podName := pod.Name
	if podName == "" {
		podName = pod.GenerateName + "<generated>"
	}
	return h.reviewPod(withPullSecretScope(ctx, req.Namespace, pod), pod, podName, log.With("pod", podName))
}

// reviewPod decides the creation of pod: left to the cluster where it
// honours the pod's fields natively, else the injector's patch.
func (h *Handler) reviewPod(ctx context.Context, pod *corev1.Pod, podName string, log *slog.Logger) (*admissionv1.AdmissionResponse, string) {
	feature := podFeature(pod)
	switch h.Native {
	case NativeOn:
		return allowNative(pod, "--native=on"), ResultUntouched
	case NativeAuto:
		// The annotation carrier is this project's own: a cluster that honours
		// the native fields still ignores it, so such pods are still injected.
		// A pod is left to the cluster only when it honours every feature
		// the pod relies on.
		if h.NativeState != nil && h.NativeState.HonouredFor(feature) && pod.Annotations[contract.AnnotationRules] == "" {
			return allow(), ResultUntouched
		}
	}
	var call injector.Call
	if h.KubeVersion != nil {
		call.KubeVersion = h.KubeVersion(feature)
	}
	if h.Delivery != nil {
		call.Delivery = h.Delivery()
	}
	res, err := h.Mutator.PodPatchWith(ctx, pod, call)
	if err != nil {
		return h.mutationFailed(ctx, err, log)
	}
	if res == nil || !res.Injected || len(res.Patch) == 0 {
		if res == nil {
			return allow(), ResultUntouched
		}
		return allow(boundWarnings(res.Warnings)...), ResultUntouched
	}
	patch, err := encodePatch(res.Patch, MaxPatchBytes)
	if errors.Is(err, errPatchTooLarge) {
		msg := fmt.Sprintf("%s: the injection's JSON patch would exceed %d bytes (containers %d, init containers %d): %v",
			podName, MaxPatchBytes, len(pod.Spec.Containers), len(pod.Spec.InitContainers), err)
		log.Info("denied", "err", msg)
		return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg), ResultDenied
	}
	if err != nil {
		log.Error("encode JSON patch", "err", err)
		return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, "encode JSON patch: "+err.Error()), ResultDenied
	}
	log.Info("injected", "containers", len(res.Containers), "names", someNames(res.Containers, 8), "patchBytes", len(patch))
	return allowPatched(patch, boundWarnings(res.Warnings)), ResultInjected
}

// mutationFailed is the answer to a mutation that failed with err: an
// image entrypoint that could not be resolved (admitted untouched with a
// warning under --on-entrypoint-error=allow), the review's deadline, or
// rules the API server would refuse.
func (h *Handler) mutationFailed(ctx context.Context, err error, log *slog.Logger) (*admissionv1.AdmissionResponse, string) {
	var epErr *injector.EntrypointError
	switch {
	case errors.As(err, &epErr) && h.Entrypoint == EntrypointAllow:
		log.Warn("admitted without supervisor", "err", err)
		return allow("restart rules NOT applied: " + err.Error()), ResultWarned
	case errors.As(err, &epErr):
		log.Info("denied: entrypoint unresolved", "err", err)
		return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error()), ResultDenied
	case ctx.Err() != nil:
		log.Warn("denied: review deadline exceeded", "err", err)
		return deny(http.StatusGatewayTimeout, metav1.StatusReasonTimeout, err.Error()), ResultDenied
	}
	log.Info("denied", "err", err)
	return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error()), ResultDenied
}

// allowNative admits a pod untouched under --native=on, warning when the pod
// relies on the annotation, which only the injector reads.
func allowNative(pod *corev1.Pod, why string) *admissionv1.AdmissionResponse {
	if pod.Annotations[contract.AnnotationRules] != "" {
		return allow(fmt.Sprintf("annotation %s is ignored (%s): use the containers' restartPolicyRules fields", contract.AnnotationRules, why))
	}
	return allow()
}

// PodFeature is the newest native feature pod's restart fields rely on:
// the one --native=auto judges the pod by.
func PodFeature(pod *corev1.Pod) NativeFeature { return podFeature(pod) }

// podFeature is the newest native feature pod's restart fields rely on.
func podFeature(pod *corev1.Pod) NativeFeature {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, r := range c.RestartPolicyRules {
				if r.Action == corev1.ContainerRestartRuleActionRestartAllContainers {
					return FeatureRestartAllContainers
				}
			}
		}
	}
	return FeatureRestartRules
}

// Warnings of one answer: kubectl prints each on its own line, and the API
// server keeps 4096 runes of them whole and cuts each further one to 256
// (k8s.io/apiserver v0.34.4 pkg/endpoints/filters/warning.go,
// truncateAtTotalRunes, truncateItemRunes): a pod of a thousand
// containers must not bring a thousand lines.
const (
	maxWarnings   = 8
	maxWarningLen = 512
)

// boundWarnings keeps the first maxWarnings, each clipped to
// maxWarningLen bytes, and says how many more there were.
func boundWarnings(ws []string) []string {
	out := make([]string, 0, min(len(ws), maxWarnings+1))
	for i, w := range ws {
		if i == maxWarnings {
			out = append(out, fmt.Sprintf("and %d more warnings", len(ws)-maxWarnings))
			break
		}
		if len(w) > maxWarningLen {
			w = strings.ToValidUTF8(w[:maxWarningLen], "") + "…"
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
