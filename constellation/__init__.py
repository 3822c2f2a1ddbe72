"""constellation: demand-driven stages (GenStage's model) on ensemble processes."""
