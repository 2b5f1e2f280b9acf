// Package validate holds the tests that check Nereid's deployment files with
// the tools' own loaders, without a Docker engine or a Kubernetes cluster:
// docker-compose.yml through compose-go (the loader and schema docker compose
// uses) and the Helm chart's rendered manifests (make helm-lint). Both check
// that every command-line flag they pass exists in the service's main, so a
// renamed flag fails here instead of in a crash-looping container.
package validate
