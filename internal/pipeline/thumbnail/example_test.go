package thumbnail_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"

	"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

func Example() {
	// A 1024×768 PNG in a stand-in for S3.
	var img bytes.Buffer
	_ = png.Encode(&img, image.NewRGBA(image.Rect(0, 0, 1024, 768)))
	src := &memSource{objects: map[string][]byte{"photos/images/cat.png": img.Bytes()}}

	p := thumbnail.New(src)
	res, err := p.Run(context.Background(), pipeline.Request{
		BatchID: "b1",
		Key:     "images/cat.png",
		Input:   json.RawMessage(`{"bucket": "photos", "key": "images/cat.png"}`),
		Options: json.RawMessage(`{"max_width": 200, "max_height": 200}`),
		Outputs: &memOutputs{},
	})
	if err != nil {
		fmt.Println(pipeline.Classify(err), err)
		return
	}
	fmt.Println(string(res.Output))
	fmt.Println(res.Cost["images"])

	// An object that is not an image fails the item permanently.
	src.objects["photos/notes.png"] = []byte("hello")
	_, err = p.Run(context.Background(), pipeline.Request{
		Key:     "notes.png",
		Input:   json.RawMessage(`{"bucket": "photos", "key": "notes.png"}`),
		Outputs: &memOutputs{},
	})
	fmt.Println(pipeline.Classify(err), err)
	// Output:
	// {"thumbnail":"s3://bulkrun-test/batches/b1/outputs/images/cat.png.png","width":200,"height":150,"source_width":1024,"source_height":768,"source_format":"png"}
	// 1
	// permanent thumbnail: notes.png: not a decodable image: image: unknown format
}
