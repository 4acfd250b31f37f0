"""What a model costs and what its parts do: training FLOPs (`flops`, Table 2's cost column)
and the behaviour and importance of each attention head (`heads`, Figures 3-5)."""
