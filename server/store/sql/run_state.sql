SELECT state FROM runs WHERE id = $1
