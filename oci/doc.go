// Package oci pulls OCI and Docker images (from registries, OCI layout
// directories and "docker save" archives), keeps their blobs in a
// content-addressed cache, and flattens their layers into root filesystems.
package oci
