package injector

import (
	"fmt"
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
