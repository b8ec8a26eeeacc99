package injector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// Delivery is how the supervisor's binaries reach the containers of an
// injected pod. Both put them at contract.BinDir, read-only, in every
// wrapped container; they differ in what runs before the pod's own
// containers.
type Delivery string

const (
	// DeliveryCopy adds the install init container, which copies the
	// binaries from the supervisor image into an emptyDir. Every release
	// and every container runtime can run it; it costs the pod one more
	// container start before its first own container (docs/benchmarks.md).
	DeliveryCopy Delivery = "copy"
	// DeliveryImage mounts the supervisor image itself as the binary
	// volume (an image volume: KEP-4639, ImageVolume beta and on by
	// default in 1.35, GA in 1.36; pkg/features/kube_features.go,
	// v1.37.2), with no init container and nothing to copy. The API
	// server, every kubelet and every container runtime must support it
	// (containerd 2.1, CRI-O 1.31): the webhook decides per cluster
	// (--delivery=auto, webhook.ImageVolumeDetector).
	DeliveryImage Delivery = "image"
)

// ParseDelivery reads a --delivery value: copy or image.
func ParseDelivery(s string) (Delivery, error) {
	switch d := Delivery(s); d {
	case DeliveryCopy, DeliveryImage:
		return d, nil
	}
	return "", fmt.Errorf("delivery %q: want copy or image", s)
}

// delivery is Options.Delivery, else copy.
func (i *Injector) delivery() Delivery {
	if i.opts.Delivery != "" {
		return i.opts.Delivery
	}
	return DeliveryCopy
}

// volumes are the binary volume of delivery d and the state volume. The
// image volume needs no size limit: the kubelet mounts the image's own
// layers, read-only (spec.volumes[].image, k8s.io/api core/v1 types.go,
// v0.37.2: "The volume will be mounted read-only (ro)").
func (i *Injector) volumes(d Delivery) []corev1.Volume {
	bin := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: i.opts.VolumeMedium, SizeLimit: i.opts.BinSizeLimit}}
	if d == DeliveryImage {
		bin = corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: i.opts.SupervisorImage, PullPolicy: i.opts.ImagePullPolicy}}
	}
	return []corev1.Volume{
		{Name: contract.BinVolume, VolumeSource: bin},
		{Name: contract.StateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: i.opts.VolumeMedium, SizeLimit: i.opts.StateSizeLimit}}},
	}
}

// missingPullSecrets are the references of names that pod does not list
// in imagePullSecrets, in the order given.
func missingPullSecrets(pod *corev1.Pod, names []string) []corev1.LocalObjectReference {
	var add []corev1.LocalObjectReference
	for _, n := range names {
		if n == "" || slices.ContainsFunc(pod.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == n }) ||
			slices.ContainsFunc(add, func(r corev1.LocalObjectReference) bool { return r.Name == n }) {
			continue
		}
		add = append(add, corev1.LocalObjectReference{Name: n})
	}
	return add
}

func (i *Injector) installContainer(pod *corev1.Pod) corev1.Container {
	c := corev1.Container{
		Name:            contract.InstallContainer,
		Image:           i.opts.SupervisorImage,
		ImagePullPolicy: i.opts.ImagePullPolicy,
		Command:         []string{contract.ImageBinaryPath, "install", contract.BinDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: contract.BinVolume, MountPath: contract.BinDir}},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if i.opts.PlatformUID {
		c.SecurityContext.RunAsUser = nil
	}
	if !isBestEffort(pod) {
		c.Resources = i.installResources(pod)
	}
	return c
}

// installResources are the requests and limits of the install container of
// a pod that is not BestEffort: Options.InitResources when set; else the
// CPU and memory requests and limits of the pod's regular container with
// the most CPU (its limit, else its request; then memory likewise; the
// first on a tie). Also under pod-level resources (spec.resources): a pod
// with pod-level requests only has its cgroup limited by its containers'
// limits when every container declares one, and the copy keeps that true.
//
// Why a copy of a container's own: init containers run before the regular
// ones, so the pod's effective request and limit of a resource are the
// larger of the regular containers' sum and any one init container's
// (k8s.io/component-helpers resource.PodRequests, v0.37.2): one regular
// container's figures never raise them. A Guaranteed pod has requests
// equal to limits in that container, so it stays Guaranteed; a Burstable
// one stays Burstable. The container passed the namespace's LimitRange
// (min, max, maxLimitRequestRatio), so the copy does too. And the copy
// gets the CPU quota the workload was given rather than a token one: under
// a 10m limit (CFS quota 1 ms per 100 ms period) the copy of 17 MB took
// 0.8 to 1.3 s instead of 10 to 21 ms.
func (i *Injector) installResources(pod *corev1.Pod) corev1.ResourceRequirements {
	if i.opts.InitResources != nil {
		return *i.opts.InitResources.DeepCopy()
	}
	amount := func(c *corev1.Container, name corev1.ResourceName) resource.Quantity {
		if q, ok := c.Resources.Limits[name]; ok {
			return q
		}
		return c.Resources.Requests[name]
	}
	best := -1
	for k := range pod.Spec.Containers {
		if best < 0 {
			best = k
			continue
		}
		c, b := &pod.Spec.Containers[k], &pod.Spec.Containers[best]
		cpu, bcpu := amount(c, corev1.ResourceCPU), amount(b, corev1.ResourceCPU)
		mem, bmem := amount(c, corev1.ResourceMemory), amount(b, corev1.ResourceMemory)
		if d := cpu.Cmp(bcpu); d > 0 || d == 0 && mem.Cmp(bmem) > 0 {
			best = k
		}
	}
	var r corev1.ResourceRequirements
	if best < 0 {
		return r
	}
	from := pod.Spec.Containers[best].Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := from.Requests[name]; ok {
			if r.Requests == nil {
				r.Requests = corev1.ResourceList{}
			}
			r.Requests[name] = q.DeepCopy()
		}
		if q, ok := from.Limits[name]; ok {
			if r.Limits == nil {
				r.Limits = corev1.ResourceList{}
			}
			r.Limits[name] = q.DeepCopy()
		}
	}
	return r
}

// withoutEmptyResources renders c for a patch, leaving out the
// "resources": {} that encoding/json writes for a container without any
// (the field's omitempty does not apply to a struct), and keeping the
// fields in the struct's order. Unescaped quotes occur in encoding/json's
// output only around keys and string values, so the sequence can only be
// the container's own resources key.
func withoutEmptyResources(c corev1.Container) any {
	if len(c.Resources.Requests) > 0 || len(c.Resources.Limits) > 0 || len(c.Resources.Claims) > 0 {
		return c
	}
	b, _ := json.Marshal(c)
	b = bytes.Replace(b, []byte(`"resources":{},`), nil, 1)
	b = bytes.Replace(b, []byte(`,"resources":{}`), nil, 1)
	return json.RawMessage(b)
}

// isBestEffort applies the kubelet's QoS rule: no container (init or
// regular) and no pod-level resources request or limit CPU or memory.
func isBestEffort(pod *corev1.Pod) bool {
	if r := pod.Spec.Resources; r != nil && (len(r.Requests) > 0 || len(r.Limits) > 0) {
		return false
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for name, q := range rl {
					if (name == corev1.ResourceCPU || name == corev1.ResourceMemory) && !q.IsZero() {
						return false
					}
				}
			}
		}
	}
	return true
}
