package openstack

import (
	"net/http"
	"strings"
	"time"
)

// image serves Glance under /image/v2.
func (c *Cloud) image(w http.ResponseWriter, r *http.Request, path string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if parts[0] != "images" || r.Method != http.MethodGet {
		notFound(w, "no such image resource "+path)
		return
	}
	var items []map[string]any
	for _, im := range c.catalog.Images {
		items = append(items, imageView(im))
	}
	if len(parts) > 1 {
		for _, it := range items {
			if it["id"] == parts[1] {
				writeJSON(w, http.StatusOK, it)
				return
			}
		}
		notFound(w, "No image found with ID "+parts[1])
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"images": filter(items, r.URL.Query()), "schema": "/v2/schemas/images", "first": "/v2/images"})
}

// epoch is when every image of the catalog was uploaded.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func imageView(im Image) map[string]any {
	return map[string]any{
		"id": im.ID, "name": im.Name, "status": "active", "visibility": "public", "protected": false, "os_hidden": false,
		"container_format": "bare", "disk_format": "raw", "min_disk": im.MinDisk, "min_ram": 0, "size": 1 << 30,
		"owner": projectID, "checksum": "", "tags": []string{}, "created_at": epoch.Format(time.RFC3339),
		"updated_at": epoch.Format(time.RFC3339), "file": "/v2/images/" + im.ID + "/file", "schema": "/v2/schemas/image",
		"self": "/v2/images/" + im.ID,
	}
}
