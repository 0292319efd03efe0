return relu {}
