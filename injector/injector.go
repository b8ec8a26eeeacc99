// Package injector owns every mutation restart-injector makes, and the
// decision of which containers run under restart-supervisor. It reads the
// rules from the KEP-5307 container fields or the
// restart-supervisor.dev/rules annotation, validates them as the API server
// would, asks an imagelookup.Resolver for the image entrypoint of a
// container without command, and records the injection as RFC 6902
// operations; that patch is its one output, and a mutated object
// (Result.Pod) is the patch applied. It also owns the rewrite of workload
// pod templates that carries their rules in the annotation
// (CarryTemplateRules) and explain's plans. It does no I/O of its own
// (imagelookup/registry is the Resolver that reads registries), never
// touches a cluster and reads no manifest streams: package manifests
// applies its patches to the documents of inject and uninject.
//
// The rules annotation is decoded strictly with go.yaml.in/yaml/v3
// (textyaml); manifests writes documents through node trees of the same
// library so that comments, key order and styles stay.
package injector

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/imagelookup"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// ImageRepository is where release images of the supervisor live. The
// names a wrapped pod shares with the supervisor are contract's; the
// status annotation records contract.Version, which also selects the
// default supervisor image tag.
const ImageRepository = "ghcr.io/restart-supervisor/restart-supervisor"

// DefaultSupervisorImage is the release image of the supervisor built with
// this injector: the same contract.Version, so that what the injector writes
// is what the installed supervisor reads.
func DefaultSupervisorImage() string { return ImageRepository + ":" + contract.Version }

// Options configure an Injector. The zero value is usable: it injects the
// release image matching contract.Version and performs no registry lookups.
type Options struct {
	// SupervisorImage runs the install init container (DeliveryCopy) or
	// is the binary volume (DeliveryImage); default
	// DefaultSupervisorImage().
	SupervisorImage string
	// PlatformUID leaves the install container's UID to the platform,
	// which assigns one from the namespace's range (OpenShift's
	// restricted-v2 SCC refuses a fixed runAsUser outside it): no
	// runAsUser is named, runAsNonRoot stays. Otherwise it runs as 65532.
	PlatformUID bool
	// ImagePullPolicy of the install container or of the image volume;
	// empty leaves it to the API server's defaulting (which for an image
	// volume follows the reference's tag as for a container's image).
	ImagePullPolicy corev1.PullPolicy
	// Delivery is how the binaries reach the pod; empty is DeliveryCopy.
	// Call.Delivery overrides it per call.
	Delivery Delivery
	// PullSecrets are added to the pod's imagePullSecrets (those it lacks)
	// so that the kubelet can pull SupervisorImage from a private
	// registry, for either delivery. Each must exist in the pod's
	// namespace.
	PullSecrets []string
	// VolumeMedium of both emptyDirs: "" (node disk) or "Memory".
	VolumeMedium corev1.StorageMedium
	// BinSizeLimit caps the binary volume; default 32Mi.
	BinSizeLimit *resource.Quantity
	// StateSizeLimit caps the state volume; default 1Mi.
	StateSizeLimit *resource.Quantity
	// InitResources, when set, are the install container's requests and
	// limits for every pod but a BestEffort one (which gets none, so it
	// stays BestEffort). Unset, each pod's install container takes the CPU
	// and memory requests and limits of the pod's own regular container
	// with the most CPU (installResources): a container that already
	// passes the namespace's LimitRange and keeps the pod's QoS class and
	// effective requests as they are, and a CPU quota under which the copy
	// is not throttled (a 10m limit made it take about a second:
	// docs/benchmarks.md).
	InitResources *corev1.ResourceRequirements
	// Resolver looks up image entrypoints for containers without command
	// (imagelookup/registry.New for registries); nil means no lookups:
	// such containers then need the
	// restart-supervisor.dev/entrypoint.<container> annotation.
	Resolver imagelookup.Resolver
	// KubeVersion is the Kubernetes release whose API-server validation
	// the restart fields must pass, with its messages; zero is the newest.
	// Call.KubeVersion overrides it per call.
	KubeVersion rules.KubeVersion
	// Backoff is the in-place back-off of every wrapped container whose
	// rules annotation gives none (field by field): the nodes'
	// CrashLoopBackOff where it is not the kubelet's default, which the
	// pod cannot see (kubelet configuration
	// crashLoopBackOff.maxContainerRestartPeriod, KEP-4603, beta in
	// 1.35). Zero fields keep the kubelet's defaults (10 s doubling to
	// 300 s).
	Backoff rules.Backoff
}

// Injector mutates pods. It is safe for concurrent use.
type Injector struct {
	opts Options
}

// New returns an Injector with opts, defaults filled in.
func New(opts Options) *Injector {
	if opts.SupervisorImage == "" {
		opts.SupervisorImage = DefaultSupervisorImage()
	}
	if opts.BinSizeLimit == nil {
		q := resource.MustParse("32Mi")
		opts.BinSizeLimit = &q
	}
	if opts.StateSizeLimit == nil {
		q := resource.MustParse("1Mi")
		opts.StateSizeLimit = &q
	}
	return &Injector{opts: opts}
}

// PatchOp is one RFC 6902 operation, relative to the root of the Pod (or
// of the pod template, for workloads).
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Result is the outcome of a mutation.
type Result struct {
	// Patch is the mutation; empty when nothing changed.
	Patch []PatchOp
	// Pod is Patch applied to a copy of the input (the input's copy when
	// nothing changed); it shares nothing with the input. Only MutatePod
	// sets it.
	Pod *corev1.Pod
	// Injected reports whether this call changed the pod.
	Injected bool
	// Containers are the names of the wrapped containers (also those
	// wrapped by an earlier run, for an already injected pod).
	Containers []string
	// Warnings are for the user (admission warnings, CLI stderr).
	Warnings []string
}

// EntrypointError says that a container without command could not get its
// image's entrypoint. The webhook may deny or admit unchanged with a warning.
type EntrypointError struct {
	Object    string // such as `pod "web-1"`
	Container string
	Image     string
	Err       error
}

func (e *EntrypointError) Error() string {
	return fmt.Sprintf("%s: container %q: cannot determine the entrypoint of image %q: %v "+
		"(set command, or the annotation %s%s)", e.Object, e.Container, e.Image, e.Err, contract.AnnotationEntrypoint, e.Container)
}

func (e *EntrypointError) Unwrap() error { return e.Err }

var _ = context.Background
