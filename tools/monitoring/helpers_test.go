package monitoring

import (
	"time"

	"github.com/prometheus/common/model"
)

func modelMinutes(n int) model.Duration { return model.Duration(time.Duration(n) * time.Minute) }
